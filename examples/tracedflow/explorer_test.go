package main

// The session explorer (sessionctl trace) against a real Jaeger, after real
// runs of the distributed gateway (examples/gateway) sending its spans there:
// with sessions in baggage every conversation checks clean; with the
// original bug (--session-store=env) the explorer flags it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildTool builds one of the repository's commands. Without -race: the
// gateway runs a child process per job, and race-enabled ones are several
// times slower on a busy machine (the gateway's own tests run it with -race).
func buildTool(t *testing.T, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s:\n%s", pkg, out)
	return bin
}

// exploration is the part of sessionctl trace --json the test reads.
type exploration struct {
	Conversations []struct {
		ID     string `json:"id"`
		Traces []struct {
			ID    string `json:"trace_id"`
			Spans []struct {
				ID      string            `json:"span_id"`
				Session map[string]string `json:"session"`
			} `json:"spans"`
		} `json:"traces"`
	} `json:"conversations"`
	Anomalies []struct {
		Kind    string `json:"kind"`
		TraceID string `json:"trace_id"`
		SpanID  string `json:"span_id"`
		Span    string `json:"span"`
		Detail  string `json:"detail"`
	} `json:"anomalies"`
	Messages    int `json:"messages"`
	Completions int `json:"completions"`
	Spans       int `json:"spans"`
}

// explorer runs sessionctl trace and returns its output and exit status.
func explorer(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	out, status, err := runExplorer(bin, args...)
	if err != nil {
		t.Fatalf("sessionctl trace %v: %v", args, err)
	}
	return out, status
}

// runExplorer runs sessionctl trace; exit status 2 (Jaeger unreadable, or a
// usage error) is an error that says what sessionctl printed.
func runExplorer(bin string, args ...string) (string, int, error) {
	cmd := exec.Command(bin, append([]string{"trace"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0, nil
	case errors.As(err, &exit) && exit.ExitCode() != 2:
		return out.String(), exit.ExitCode(), nil
	}
	return "", 0, fmt.Errorf("%w\n%s%s", err, out.String(), errOut.String())
}

func TestExplorerAfterGatewayRuns(t *testing.T) {
	bins := t.TempDir()
	gateway := buildTool(t, bins, "./examples/gateway")
	sessionctl := buildTool(t, bins, "./examples/sessionctl")
	const messages, conversations = 16, 4
	t.Logf("built the gateway and sessionctl")

	for _, store := range []string{"baggage", "env"} {
		t.Run(store, func(t *testing.T) {
			start := time.Now()
			otlp, query := startJaeger(t) // one Jaeger per run: the runs share service names
			t.Logf("%s: Jaeger ready in %v", store, time.Since(start).Round(time.Millisecond))
			start = time.Now()
			jaeger := "http://" + query
			// The environment store loses deliveries: a short timeout ends
			// its run sooner (the driver counts the rest as lost).
			timeout := "60s"
			if store == "env" {
				timeout = "10s"
			}
			cmd := exec.Command(gateway, "--messages", fmt.Sprint(messages), "--conversations", fmt.Sprint(conversations), "--timeout", timeout,
				"--session-store", store, "--json")
			cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+otlp)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			var sum struct {
				Sent      int `json:"sent"`
				Delivered int `json:"delivered"`
				Misrouted int `json:"misrouted"`
			}
			require.NoError(t, json.Unmarshal(out.Bytes(), &sum), "gateway: %v\n%s%s", err, out.String(), errOut.String())
			require.Equal(t, messages, sum.Sent)
			if store == "baggage" {
				require.NoError(t, err, errOut.String())
				require.Zero(t, sum.Misrouted)
			}
			t.Logf("%s: the gateway ran in %v: %d delivered, %d misrouted", store, time.Since(start).Round(time.Millisecond), sum.Delivered, sum.Misrouted)

			// The gateway flushed its spans before it exited; Jaeger stores
			// them after its batch timeout. Wait until every message's trace
			// is there and the span count holds still.
			start = time.Now()
			var ex exploration
			last := -1
			deadline := time.Now().Add(30 * time.Second)
			for {
				raw, _, err := runExplorer(sessionctl, "--jaeger", jaeger, "--json")
				if err != nil && strings.Contains(err.Error(), "no service is known to Jaeger") && time.Now().Before(deadline) {
					// Jaeger has stored no span yet: its batch is still open.
					time.Sleep(time.Second)
					continue
				}
				require.NoError(t, err, "sessionctl trace")
				ex = exploration{}
				require.NoError(t, json.Unmarshal([]byte(raw), &ex))
				if ex.Messages == messages && ex.Spans == last {
					break
				}
				require.True(t, time.Now().Before(deadline), "Jaeger holds %d of %d messages' traces after 30s", ex.Messages, messages)
				last = ex.Spans
				time.Sleep(time.Second)
			}
			t.Logf("%s: Jaeger held every trace after %v: %d conversations, %d messages, %d completions, %d spans, %d anomalies",
				store, time.Since(start).Round(time.Millisecond), len(ex.Conversations), ex.Messages, ex.Completions, ex.Spans, len(ex.Anomalies))
			page := filepath.Join(t.TempDir(), store+".html")
			text, status := explorer(t, sessionctl, "--jaeger", jaeger, "--check", "--html", page)
			html, err := os.ReadFile(page)
			require.NoError(t, err)

			if store == "baggage" {
				assert.Equal(t, 0, status, "a clean run checks clean:\n%s", text)
				assert.Empty(t, ex.Anomalies)
				// The API channel is stateless: each request its own conversation.
				assert.GreaterOrEqual(t, len(ex.Conversations), conversations)
				assert.Positive(t, ex.Completions)
				assert.Contains(t, text, " 0 anomalies")
				assert.Contains(t, string(html), "no anomalies")
				// Each conversation on its own, found by its session key.
				for _, c := range ex.Conversations {
					text, status := explorer(t, sessionctl, "--jaeger", jaeger, "--session", c.ID, "--check")
					assert.Equal(t, 0, status, "%s:\n%s", c.ID, text)
					assert.Contains(t, text, "conversation "+c.ID+":")
					assert.Equal(t, 1, strings.Count(text, "\nconversation "), "only %s", c.ID)
				}
				return
			}
			assert.Equal(t, 1, status, "--check must fail on the environment store's run:\n%s", text)
			kinds := map[string]int{}
			for _, a := range ex.Anomalies {
				kinds[a.Kind]++
			}
			t.Logf("anomalies by kind: %v", kinds)
			// The worker keeps the session in its environment: every job (and
			// every redelivery of one) arrives at the worker without it.
			assert.GreaterOrEqual(t, kinds["session-stripped"]+kinds["no-session-after-ingress"], messages)
			if sum.Misrouted > 0 {
				// Whether jobs overlap enough to misroute is up to the
				// scheduler; when they did, the explorer sees it.
				assert.Positive(t, kinds["session-differs"]+kinds["completion-misrouted"], "misrouted deliveries carry another session")
			}
			assert.Regexp(t, "session-stripped|no-session-after-ingress", text)

			// A misrouted completion carries the session it was sent to: asked
			// for that conversation, the explorer reads the completion's turn
			// by its trace id (the search does not return it) to tell.
			for _, a := range ex.Anomalies {
				if a.Kind != "completion-misrouted" {
					continue
				}
				var key string
				for _, c := range ex.Conversations {
					for _, tr := range c.Traces {
						for _, s := range tr.Spans {
							if tr.ID == a.TraceID && s.ID == a.SpanID {
								key = s.Session["session.key"]
							}
						}
					}
				}
				require.NotEmpty(t, key)
				text, status := explorer(t, sessionctl, "--jaeger", jaeger, "--session", key, "--check")
				assert.Equal(t, 1, status)
				assert.Contains(t, text, "completion-misrouted  completion delivered to", "found from the conversation it reached:\n%s", text)
				break
			}
			assert.Contains(t, string(html), "anomalies</span>")
		})
	}
}
