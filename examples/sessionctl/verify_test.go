package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

const testSecret = "0123456789abcdef0123456789abcdef-test"

// signed returns the baggage header of a session signed with key id kid at
// time at, bound to a NATS message on gw.jobs.telegram with the Nats-Msg-Id
// messageID when it is not empty.
func signed(t *testing.T, kid string, at time.Time, messageID string) string {
	t.Helper()
	s, err := propagation.NewSigner(propagation.Key{ID: kid, Secret: []byte(testSecret)},
		propagation.WithClock(func() time.Time { return at }))
	require.NoError(t, err)
	ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "telegram", ChatID: "42", ThreadID: "7"})
	if messageID != "" {
		ctx, err = s.SignFor(ctx, natssession.Binding("gw.jobs.telegram", messageID))
	} else {
		ctx, err = s.Sign(ctx)
	}
	require.NoError(t, err)
	h := http.Header{}
	otelprop.Baggage{}.Inject(ctx, otelprop.HeaderCarrier(h))
	return h.Get("baggage")
}

func verifyJSON(t *testing.T, lookup func(string) (string, bool), args ...string) (int, verifyReport, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append([]string{"--json", "verify"}, args...), &out, &errOut, lookup)
	var r verifyReport
	if code != exitUsage {
		require.NoError(t, json.Unmarshal(out.Bytes(), &r), out.String())
	}
	return code, r, errOut.String()
}

func TestVerify(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == "KEY" {
			return testSecret, true
		}
		return "", false
	}
	now := time.Now()
	good := signed(t, "2026-12", now.Add(-30*time.Second), "")

	code, r, _ := verifyJSON(t, env, "--key-env", "KEY", good)
	assert.Equal(t, exitYes, code, r.Reason)
	assert.True(t, r.Verified)
	assert.Equal(t, "2026-12", r.KeyID)
	assert.InDelta(t, 30, r.AgeSeconds, 5)
	covered := map[string]string{}
	for _, c := range r.Covers {
		covered[c.Key] = c.State
	}
	assert.Equal(t, "set", covered["session.chat_id"])
	assert.Equal(t, "cleared", covered["session.user_id"], "Bind clears the fields it was not given")
	assert.NotContains(t, covered, "session.sig")

	// The same from a key file, with the newline an editor adds.
	file := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(file, []byte(testSecret+"\n"), 0o600))
	code, _, _ = verifyJSON(t, noEnv, "--key-file", file, good)
	assert.Equal(t, exitYes, code)

	for _, tc := range []struct {
		name   string
		args   []string
		reason string
	}{
		{"tampered", []string{strings.Replace(good, "session.thread_id=7", "session.thread_id=8", 1)}, "MAC does not match"},
		{"another key id", []string{"--key-id", "2027-01", good}, `names key "2026-12"`},
		{"expired", []string{signed(t, "2026-12", now.Add(-time.Hour), "")}, "older than --max-age"},
		{"from the future", []string{signed(t, "2026-12", now.Add(time.Hour), "")}, "in the future"},
		{"unsigned", []string{"session.platform=telegram,session.chat_id=42"}, "not signed"},
		{"bound to a message, none given", []string{signed(t, "2026-12", now, "m-1")}, "--nats-subject"},
		{"bound to another message", []string{"--nats-subject", "gw.jobs.telegram", "--message-id", "m-2", signed(t, "2026-12", now, "m-1")},
			`another message than the one on NATS subject "gw.jobs.telegram", Nats-Msg-Id "m-2"`},
		{"published to another subject", []string{"--nats-subject", "gw.jobs.slack", "--message-id", "m-1", signed(t, "2026-12", now, "m-1")}, "another message"},
		{"as a Kafka record", []string{"--kafka-topic", "gw.jobs.telegram", "--message-id", "m-1", signed(t, "2026-12", now, "m-1")}, "another message"},
		{"malformed signature", []string{"session.chat_id=1,session.sig=v2.x"}, "not a signature"},
		{"not baggage", []string{"hello world"}, "not signed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, r, _ := verifyJSON(t, env, append([]string{"--key-env", "KEY"}, tc.args...)...)
			assert.Equal(t, exitNo, code)
			assert.False(t, r.Verified)
			assert.Contains(t, r.Reason, tc.reason)
		})
	}
	code, r, _ = verifyJSON(t, env, "--key-env", "KEY", "--nats-subject", "gw.jobs.telegram", "--message-id", "m-1", signed(t, "2026-12", now, "m-1"))
	assert.Equal(t, exitYes, code, r.Reason)
	assert.Equal(t, `NATS subject "gw.jobs.telegram", Nats-Msg-Id "m-1"`, r.BoundTo)

	// A queue's signature is bound to its destination: an id alone, or two
	// destinations, make no sense.
	for _, args := range [][]string{
		{"--message-id", "m-1"},
		{"--nats-subject", "a", "--kafka-topic", "b"},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, exitUsage, run(append(append([]string{"verify", "--key-env", "KEY"}, args...), good), &out, &errOut, env), "%v", args)
		assert.Contains(t, errOut.String(), "--nats-subject", "%v", args)
	}

	// The text form names the key, the age and the reason.
	var out bytes.Buffer
	assert.Equal(t, exitNo, run([]string{"verify", "--key-env", "KEY", "--key-id", "other", good}, &out, &bytes.Buffer{}, env))
	assert.Contains(t, out.String(), "key id         2026-12")
	assert.Contains(t, out.String(), "ago")
	assert.Contains(t, out.String(), "not verified:")
}

func TestVerifyUsageErrors(t *testing.T) {
	env := func(k string) (string, bool) {
		switch k {
		case "KEY":
			return testSecret, true
		case "SHORT":
			return "short", true
		}
		return "", false
	}
	h := "session.chat_id=1"
	for name, args := range map[string][]string{
		"no key":         {h},
		"two keys":       {"--key-env", "KEY", "--key-file", "/nonexistent", h},
		"no header":      {"--key-env", "KEY"},
		"unset variable": {"--key-env", "NOPE", h},
		"missing file":   {"--key-file", "/nonexistent/key", h},
		"short secret":   {"--key-env", "SHORT", h},
		"bad max age":    {"--key-env", "KEY", "--max-age", "-1s", h},
		"unknown flag":   {"--key-env", "KEY", "--bogus", h},
	} {
		var errOut bytes.Buffer
		assert.Equal(t, exitUsage, run(append([]string{"verify"}, args...), &bytes.Buffer{}, &errOut, env), name)
		assert.NotEmpty(t, errOut.String(), name)
	}
}

// A header pasted whole, from standard input, verifies as its value does.
func TestVerifyReadsStandardInput(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == "KEY" {
			return testSecret, true
		}
		return "", false
	}
	good := signed(t, "2026-12", time.Now(), "")
	var out, errOut bytes.Buffer
	code := runWith([]string{"--json", "verify", "--key-env", "KEY", "-"}, strings.NewReader("> baggage: "+good+"\r\n"), &out, &errOut, env)
	require.Equal(t, exitYes, code, errOut.String())
	var r verifyReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &r))
	assert.True(t, r.Verified)
	assert.Equal(t, []string{`line 1: read as the value of its header (the name "baggage:" is not part of it)`}, r.Notes)
}
