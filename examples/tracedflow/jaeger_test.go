package main

// The end-to-end check of traces: a real Jaeger v2 (built by
// collector-config/jaegertool/build.sh; see jaegerBinary) receives
// the flow's spans over OTLP/HTTP, and its query API is asked for one
// message's thread.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/examples/internal/demotrace"
	"github.com/sessionwire/sessionwire/examples/internal/threadrpc"
	"github.com/sessionwire/sessionwire/internal/syncbuf"
)

func TestMain(m *testing.M) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if os.Getenv(toolEnv) != "" { // the child process the worker runs
		os.Exit(runTool(os.Stdout))
	}
	os.Exit(m.Run())
}

func TestFlowRoutesEveryDelivery(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	res, err := run(context.Background(), 12, &demotrace.Summary{})
	require.NoError(t, err)
	assert.Equal(t, 24, res.delivered)
	assert.Zero(t, res.misrouted)
	assert.Zero(t, res.lost)
	assert.Zero(t, res.toolMismatch)
	assert.Zero(t, res.downstreamMismatch)
	assert.Zero(t, res.grpcMismatch)
}

// jaegerSpan is the part of Jaeger's /api/traces answer the test reads.
type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	ProcessID     string `json:"processID"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

type jaegerTrace struct {
	TraceID   string                                  `json:"traceID"`
	Spans     []jaegerSpan                            `json:"spans"`
	Processes map[string]struct{ ServiceName string } `json:"processes"`
}

func (s jaegerSpan) tag(key string) (string, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value), true
		}
	}
	return "", false
}

// freeAddrs returns n distinct loopback addresses that were free a moment
// ago: the listeners are held until all n are chosen.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}

// startJaeger runs Jaeger on free ports and waits for its query API. A port
// can be taken by another process between being chosen and Jaeger binding
// it; Jaeger then exits saying so, and is started again on other ports.
func startJaeger(t *testing.T) (otlp, query string) {
	bin := jaegerBinary(t)
	for attempt := 1; ; attempt++ {
		otlp, query, inUse := tryJaeger(t, bin)
		if !inUse {
			return otlp, query
		}
		if attempt == 3 {
			t.Fatalf("jaeger could not bind its ports in %d attempts: another process took them each time", attempt)
		}
		t.Logf("jaeger: a port was taken before it could bind it; starting it again on other ports")
	}
}

// tryJaeger starts Jaeger once. inUse reports that it exited because a port
// was taken; any other failure fails the test.
func tryJaeger(t *testing.T, bin string) (otlp, query string, inUse bool) {
	addrs := freeAddrs(t, 4)
	otlp, query = addrs[0], addrs[1]
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config=file:"+filepath.Join("..", "..", "collector-config", "jaeger.yaml"))
	cmd.Env = append(os.Environ(), "JAEGER_OTLP_HTTP="+otlp, "JAEGER_OTLP_GRPC="+addrs[2],
		"JAEGER_QUERY_HTTP="+query, "JAEGER_QUERY_GRPC="+addrs[3])
	logs := new(syncbuf.Buffer)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.WaitDelay = 5 * time.Second
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() { cancel(); <-exited }
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			cancel()
			if strings.Contains(logs.String(), "address already in use") {
				return "", "", true
			}
			t.Fatalf("jaeger exited before answering:\n%s", logs.String())
		default:
		}
		resp, err := http.Get("http://" + query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Cleanup(func() {
					stop()
					if t.Failed() {
						t.Logf("jaeger output:\n%s", logs.String())
					}
				})
				return otlp, query, false
			}
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("jaeger did not answer on %s within 60s; its output:\n%s", query, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tracesByTag asks Jaeger for the traces of service holding a span tagged
// key=value, waiting (bounded) until at least min have been ingested and
// complete says their spans are all there: services export in batches, and
// Jaeger ingests them asynchronously.
func tracesByTag(t *testing.T, query, service, key, value string, min int, complete func([]jaegerTrace) bool) []jaegerTrace {
	t.Helper()
	tags, _ := json.Marshal(map[string]string{key: value})
	u := fmt.Sprintf("http://%s/api/traces?service=%s&limit=100&lookback=1h&tags=%s", query, url.QueryEscape(service), url.QueryEscape(string(tags)))
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(u)
		require.NoError(t, err)
		var body struct {
			Data []jaegerTrace `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		require.NoError(t, err)
		if len(body.Data) >= min && (complete == nil || complete(body.Data)) || time.Now().After(deadline) {
			return body.Data
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func TestJaegerFindsOneMessageByThread(t *testing.T) {
	otlp, query := startJaeger(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+otlp)

	res, err := run(context.Background(), 2, &demotrace.Summary{})
	require.NoError(t, err)
	require.Zero(t, res.misrouted)
	require.Zero(t, res.lost)

	mine, other := conversation(0), conversation(1)

	// The turn: one trace, from the gateway through every hop.
	hops := []string{"tracedflow-gateway", "tracedflow-worker", "tracedflow-tool", "tracedflow-downstream",
		"tracedflow-downstream-grpc", "tracedflow-router"}
	allHops := func(trs []jaegerTrace) bool {
		seen := map[string]bool{}
		for _, tr := range trs {
			for _, s := range tr.Spans {
				seen[tr.Processes[s.ProcessID].ServiceName] = true
			}
		}
		return len(seen) == len(hops)
	}
	turns := tracesByTag(t, query, "tracedflow-gateway", "session.thread_id", mine.ThreadID, 1, allHops)
	require.Len(t, turns, 1, "exactly that message's trace")
	turn := turns[0]
	t.Logf("turn trace %s: %d spans", turn.TraceID, len(turn.Spans))
	services := map[string]bool{}
	var originSpan string
	for _, s := range turn.Spans {
		thread, ok := s.tag("session.thread_id")
		if !ok {
			continue // spans started before the session was bound (an HTTP client span's parent, say)
		}
		assert.Equal(t, mine.ThreadID, thread, "%s carries another session", s.OperationName)
		services[turn.Processes[s.ProcessID].ServiceName] = true
		chat, _ := s.tag("session.chat_id")
		assert.Equal(t, mine.ChatID, chat, s.OperationName)
		anchor, _ := s.tag("session.message_id")
		assert.Equal(t, mine.MessageID, anchor, s.OperationName)
		if name, ok := s.tag("session.user_name"); ok {
			assert.True(t, strings.HasPrefix(name, "hmac:"), "%s: user name in clear", s.OperationName)
		}
		if strings.HasPrefix(s.OperationName, "process ") {
			originSpan = s.SpanID
		}
	}
	for _, svc := range hops {
		assert.True(t, services[svc], "no span of %s carries the session", svc)
	}
	// The gRPC hop: otelgrpc's client span in the worker and its server span
	// in the gRPC service, which otelgrpc started from the session the
	// Edge's policy accepted in otelgrpc's own propagation step.
	grpcSpans := map[string]string{}
	for _, s := range turn.Spans {
		if s.OperationName != strings.TrimPrefix(threadrpc.Method, "/") {
			continue
		}
		kind, _ := s.tag("span.kind")
		thread, _ := s.tag("session.thread_id")
		grpcSpans[kind+" in "+turn.Processes[s.ProcessID].ServiceName] = thread
	}
	assert.Equal(t, map[string]string{"client in tracedflow-worker": mine.ThreadID,
		"server in tracedflow-downstream-grpc": mine.ThreadID}, grpcSpans, "the gRPC spans and their session.thread_id")
	raw, err := json.Marshal(turn)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), mine.UserName, "no user name in clear anywhere in the trace")
	assert.NotContains(t, string(raw), other.ThreadID, "the other conversation's fields never appear")

	// The background completion: its own trace, linked to the turn.
	completions := tracesByTag(t, query, "tracedflow-router", "session.thread_id", mine.ThreadID, 2, nil)
	var linked bool
	for _, tr := range completions {
		for _, s := range tr.Spans {
			if s.OperationName != "deliver completion" {
				continue
			}
			for _, ref := range s.References {
				if ref.RefType == "FOLLOWS_FROM" && ref.TraceID == turn.TraceID && ref.SpanID == originSpan {
					linked = true
				}
			}
			assert.NotEqual(t, turn.TraceID, s.TraceID, "a completion after the turn starts its own trace")
		}
	}
	assert.True(t, linked, "the completion's span links to the turn's consumer span")

	// The second conversation's trace is its own.
	others := tracesByTag(t, query, "tracedflow-gateway", "session.thread_id", other.ThreadID, 1, allHops)
	require.Len(t, others, 1)
	assert.NotEqual(t, turn.TraceID, others[0].TraceID)
	raw, _ = json.Marshal(others[0])
	assert.NotContains(t, string(raw), `"`+mine.ThreadID+`"`)
}
