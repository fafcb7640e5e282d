package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fixtures are Jaeger's /api/traces answers for two runs of the gateway
// (go run ./examples/gateway --messages 12 --conversations 4 --seed 3, with
// OTEL_EXPORTER_OTLP_ENDPOINT at a Jaeger v1.75 of collector-config), one
// per session store, merged across the three services and with the span
// tags that are not session.*, gen_ai.*, span.kind or otel.scope.name left
// out to keep them small.
const (
	fixtureBaggage = "testdata/jaeger-baggage.json"
	fixtureEnv     = "testdata/jaeger-env.json"
)

func exploreFile(t *testing.T, path string) *Exploration {
	t.Helper()
	traces, err := readSaved(path)
	require.NoError(t, err)
	return explore(traces)
}

func TestRecordedRunWithSessionsIsClean(t *testing.T) {
	ex := exploreFile(t, fixtureBaggage)
	assert.Empty(t, ex.Anomalies)
	assert.Equal(t, 12, ex.Messages)
	assert.Equal(t, 2, ex.Completions)
	assert.Len(t, ex.Conversations, 8)
	for _, c := range ex.Conversations {
		assert.True(t, strings.HasPrefix(c.ID, "agent:main:"), "grouped by gen_ai.conversation.id: %s", c.ID)
		assert.Equal(t, []string{"gateway-gateway", "gateway-worker", "gateway-router"}, c.Services, "lanes from ingress to delivery")
		for i, tr := range c.Traces {
			if i > 0 {
				assert.LessOrEqual(t, c.Traces[i-1].Start, tr.Start, "time order")
			}
			require.Len(t, tr.Routes, 1, "trace %s: one delivery", tr.ID)
			assert.Equal(t, whereTo(tr.Session), tr.Routes[0].Where, "delivered to its own route")
			if tr.Kind == "completion" {
				require.NotNil(t, tr.Origin)
				assert.Equal(t, "deliver completion", tr.Routes[0].Span)
				var found bool
				for _, o := range c.Traces {
					found = found || o.ID == tr.Origin.TraceID
				}
				assert.True(t, found, "the completion's turn is in its conversation")
			}
			for _, s := range tr.Spans {
				assert.Equal(t, carriedSame, s.Carried, "%s: %s", s.Service, s.Name)
			}
		}
	}
}

// A span processor records gen_ai.conversation.id only when asked to
// (sessiontrace.Redaction.ConversationID): without it the same run groups
// into the same conversations, by session.key, and checks as clean.
func TestConversationsWithoutTheGenAIConversationID(t *testing.T) {
	traces, err := readSaved(fixtureBaggage)
	require.NoError(t, err)
	want := explore(traces)
	stripped := 0
	for i := range traces {
		for j := range traces[i].Spans {
			sp := &traces[i].Spans[j]
			tags := sp.Tags[:0]
			for _, kv := range sp.Tags {
				if kv.Key == tagConversation {
					stripped++
					continue
				}
				tags = append(tags, kv)
			}
			sp.Tags = tags
		}
	}
	require.Positive(t, stripped, "the fixture carries the GenAI conversation id")
	got := explore(traces)
	assert.Empty(t, got.Anomalies)
	assert.Equal(t, want.Messages, got.Messages)
	assert.Equal(t, want.Completions, got.Completions)
	ids := func(ex *Exploration) map[string]int {
		m := map[string]int{}
		for _, c := range ex.Conversations {
			m[c.ID] = len(c.Traces)
		}
		return m
	}
	assert.Equal(t, ids(want), ids(got), "the same conversations, each with the same traces")
}

func TestRecordedRunWithTheEnvironmentStoreIsFlagged(t *testing.T) {
	ex := exploreFile(t, fixtureEnv)
	kinds := map[string]int{}
	for _, a := range ex.Anomalies {
		kinds[a.Kind]++
	}
	// The worker kept the session in its environment: no hop after the
	// queue carries it, and replies went to whichever message wrote the
	// environment last.
	assert.Equal(t, 12, kinds[anomalyStripped], "every job lost its session at the worker")
	assert.Positive(t, kinds[anomalyDiffers], "replies routed by another conversation's session")
	for _, a := range ex.Anomalies {
		if a.Kind == anomalyStripped {
			assert.True(t, strings.HasPrefix(a.Span, "gateway-worker: process gw.jobs."), a.Span)
			assert.Contains(t, a.Detail, "no refusal recorded")
		}
		if a.Kind == anomalyDiffers {
			assert.Equal(t, "gateway-router: deliver reply", a.Span)
		}
	}
}

func TestCheckExitStatus(t *testing.T) {
	for _, tc := range []struct {
		file string
		want int
	}{{fixtureBaggage, 0}, {fixtureEnv, 1}} {
		var out, errOut bytes.Buffer
		code := run([]string{"trace", "--file", tc.file, "--check"}, &out, &errOut, noEnv)
		assert.Equal(t, tc.want, code, "%s: %s", tc.file, errOut.String())
	}
	// Without --check, anomalies are shown but the status is 0.
	var out, errOut bytes.Buffer
	assert.Equal(t, 0, run([]string{"trace", "--file", fixtureEnv}, &out, &errOut, noEnv))
	assert.Contains(t, out.String(), "session-stripped")
	assert.Contains(t, out.String(), "<-- anomaly")
}

func TestFilterAndJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"trace", "--file", fixtureBaggage, "--thread", "thread-1", "--json"}, &out, &errOut, noEnv)
	require.Equal(t, 0, code, errOut.String())
	var ex Exploration
	require.NoError(t, json.Unmarshal(out.Bytes(), &ex))
	require.Len(t, ex.Conversations, 1)
	assert.Equal(t, "agent:main:discord:thread-1:thread-1", ex.Conversations[0].ID)
	assert.Equal(t, 3, ex.Messages)
	assert.Equal(t, 1, ex.Completions)
}

// One conversation, message or completion is counted in the singular.
func TestFilterInText(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"trace", "--file", fixtureBaggage, "--thread", "thread-1"}, &out, &errOut, noEnv)
	require.Equal(t, 0, code, errOut.String())
	assert.Contains(t, out.String(), "conversation agent:main:discord:thread-1:thread-1: 3 messages, 1 completion, 0 anomalies\n")
	assert.Regexp(t, `\n1 conversation, 3 messages, 1 completion, \d+ spans, 0 anomalies\n`, out.String())
}

func TestTraceUsageErrors(t *testing.T) {
	closed := func() string { // a port nothing listens on
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		return "http://" + ln.Addr().String()
	}()
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"data": [{"spans": []}]}`), 0o600))
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"trace"}, "say where the traces are"},
		{[]string{"trace", "--jaeger", "127.0.0.1:16686"}, "is not an http(s) URL"},
		{[]string{"trace", "--jaeger", closed, "--file", "x"}, "alternatives"},
		{[]string{"trace", "--file", fixtureEnv, "--chat", "a", "--thread", "b"}, "at most one of"},
		{[]string{"trace", "--file", fixtureEnv, "--lookback", "-1h"}, "--lookback must be positive"},
		{[]string{"trace", "--file", fixtureEnv, "thread-1"}, `unexpected argument "thread-1"`},
		{[]string{"trace", "--nope"}, "flag provided but not defined"},
		{[]string{"trace", "--jaeger", closed}, "cannot reach Jaeger's query API at " + closed},
		{[]string{"trace", "--file", "testdata/missing.json"}, "read saved traces"},
		{[]string{"trace", "--file", bad}, "trace 0 has no traceID"},
		{[]string{"trace", "--file", "trace_test.go"}, "is not a Jaeger /api/traces answer"},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut, noEnv)
		assert.Equal(t, 2, code, "%v", tc.args)
		assert.Contains(t, errOut.String(), tc.says, "%v", tc.args)
	}
	var out, errOut bytes.Buffer
	assert.Equal(t, 0, run([]string{"trace", "--help"}, &out, &errOut, noEnv))
	assert.Contains(t, out.String(), "session-stripped", "help goes to standard output, as for every command")
	assert.Contains(t, out.String(), "-lookback duration", "with the flags")
}

// span describes one span of a constructed trace.
type span struct {
	id, parent, service, name, kind string
	start, dur                      int64
	session                         map[string]string
	link                            *jRef // to another trace
	refusal                         string
}

func sess(chat, thread, msg string) map[string]string {
	return map[string]string{tagPlatform: "slack", tagScope: "T1", tagChat: chat, tagThread: thread, tagMessage: msg,
		tagKey: "agent:main:slack:" + chat + ":" + thread, tagConversation: "agent:main:slack:" + chat + ":" + thread}
}

func mkTrace(id string, spans ...span) jTrace {
	t := jTrace{TraceID: id, Processes: map[string]jProcess{}}
	for i, s := range spans {
		pid := "p" + s.service
		t.Processes[pid] = jProcess{ServiceName: s.service}
		js := jSpan{TraceID: id, SpanID: s.id, OperationName: s.name, StartTime: 1_000_000 + s.start, Duration: s.dur, ProcessID: pid}
		if s.parent != "" {
			js.References = append(js.References, jRef{RefType: "CHILD_OF", TraceID: id, SpanID: s.parent})
		}
		if s.link != nil {
			js.References = append(js.References, *s.link)
		}
		if s.kind != "" {
			js.Tags = append(js.Tags, jKV{Key: tagSpanKind, Value: s.kind})
		}
		for k, v := range s.session {
			js.Tags = append(js.Tags, jKV{Key: k, Value: v})
		}
		if s.refusal != "" {
			js.Logs = append(js.Logs, jLog{Timestamp: js.StartTime, Fields: []jKV{{Key: "event", Value: eventRefused}, {Key: attrReason, Value: s.refusal}}})
		}
		spans[i] = s
		t.Spans = append(t.Spans, js)
	}
	return t
}

// turn is a healthy message: ingress, queue, worker, router, every span
// with the message's session.
func turn(id, chat, thread, msg string) jTrace {
	s := sess(chat, thread, msg)
	return mkTrace(id,
		span{id: id + "-in", service: "ingress", name: "ingress slack", start: 0, dur: 100, session: s},
		span{id: id + "-pub", parent: id + "-in", service: "ingress", name: "publish jobs", kind: "producer", start: 10, dur: 50, session: s},
		span{id: id + "-proc", parent: id + "-pub", service: "worker", name: "process jobs", kind: "consumer", start: 200, dur: 400, session: s},
		span{id: id + "-dlv", parent: id + "-proc", service: "router", name: "deliver reply", start: 500, dur: 50, session: s},
	)
}

func anomaliesOf(ex *Exploration) map[string][]Anomaly {
	m := map[string][]Anomaly{}
	for _, a := range ex.Anomalies {
		m[a.Kind] = append(m[a.Kind], a)
	}
	return m
}

func TestEachAnomaly(t *testing.T) {
	origin := &jRef{RefType: "FOLLOWS_FROM", TraceID: "t1", SpanID: "t1-proc"}
	here, elsewhere := sess("C1", "th1", "m1"), sess("C2", "th9", "m7")

	t.Run("clean turn and completion", func(t *testing.T) {
		ex := explore([]jTrace{turn("t1", "C1", "th1", "m1"), mkTrace("c1",
			span{id: "c1-bg", service: "worker", name: "background work", start: 900, dur: 100, session: here, link: origin},
			span{id: "c1-dlv", parent: "c1-bg", service: "router", name: "deliver completion", start: 1000, dur: 10, session: here})})
		assert.Empty(t, ex.Anomalies)
		require.Len(t, ex.Conversations, 1)
		assert.Equal(t, "completion", ex.Conversations[0].Traces[1].Kind)
	})
	t.Run("completion delivered elsewhere", func(t *testing.T) {
		ex := explore([]jTrace{turn("t1", "C1", "th1", "m1"), mkTrace("c1",
			span{id: "c1-bg", service: "worker", name: "background work", start: 900, dur: 100, session: here, link: origin},
			span{id: "c1-dlv", parent: "c1-bg", service: "router", name: "deliver completion", start: 1000, dur: 10, session: elsewhere})})
		a := anomaliesOf(ex)
		require.Len(t, a[anomalyMisrouted], 1, "%v", ex.Anomalies)
		assert.Contains(t, a[anomalyMisrouted][0].Detail, "completion delivered to slack scope T1 chat C2 thread th9 anchor m7")
		assert.Contains(t, a[anomalyMisrouted][0].Detail, "came from slack scope T1 chat C1 thread th1 anchor m1")
		assert.Len(t, ex.Anomalies, 1)
	})
	t.Run("completion whose whole trace carries another session", func(t *testing.T) {
		// Its own root says C2, but its turn was C1: judged by the turn.
		ex := explore([]jTrace{turn("t1", "C1", "th1", "m1"), mkTrace("c1",
			span{id: "c1-bg", service: "worker", name: "background work", start: 900, dur: 100, session: elsewhere, link: origin},
			span{id: "c1-dlv", parent: "c1-bg", service: "router", name: "deliver completion", start: 1000, dur: 10, session: elsewhere})})
		a := anomaliesOf(ex)
		assert.Len(t, a[anomalyMisrouted], 1)
		assert.Len(t, a[anomalyDiffers], 1)
	})
	t.Run("another session mid-trace", func(t *testing.T) {
		s := here
		ex := explore([]jTrace{mkTrace("t2",
			span{id: "a", service: "ingress", name: "ingress", dur: 100, session: s},
			span{id: "b", parent: "a", service: "worker", name: "process", kind: "consumer", start: 10, dur: 50, session: elsewhere},
			span{id: "c", parent: "b", service: "router", name: "deliver reply", start: 20, dur: 5, session: elsewhere})})
		a := anomaliesOf(ex)
		require.Len(t, a[anomalyDiffers], 1, "one per trace: %v", ex.Anomalies)
		assert.Equal(t, "worker: process", a[anomalyDiffers][0].Span)
		assert.Contains(t, a[anomalyDiffers][0].Detail, `chat_id="C2" (expected "C1")`)
		assert.Contains(t, a[anomalyDiffers][0].Detail, "and 1 later spans")
		assert.Len(t, ex.Anomalies, 1)
	})
	t.Run("stripped with its reason, then bound again", func(t *testing.T) {
		ex := explore([]jTrace{mkTrace("t3",
			span{id: "a", service: "ingress", name: "ingress", dur: 100, session: here},
			span{id: "b", parent: "a", service: "ingress", name: "publish", kind: "producer", start: 5, dur: 10, session: here},
			span{id: "c", parent: "b", service: "worker", name: "process", kind: "consumer", start: 20, dur: 50, refusal: "untrusted: no signature"},
			span{id: "d", parent: "c", service: "router", name: "deliver reply", start: 30, dur: 5, session: here})})
		a := anomaliesOf(ex)
		require.Len(t, a[anomalyStripped], 1, "%v", ex.Anomalies)
		assert.Equal(t, "worker: process", a[anomalyStripped][0].Span)
		assert.Contains(t, a[anomalyStripped][0].Detail, "session refused: untrusted: no signature")
		assert.Len(t, ex.Anomalies, 1)
	})
	t.Run("no session after the ingress", func(t *testing.T) {
		ex := explore([]jTrace{mkTrace("t4",
			span{id: "a", service: "ingress", name: "ingress", dur: 100, session: here},
			span{id: "b", parent: "a", service: "ingress", name: "publish", kind: "producer", start: 5, dur: 10, session: here},
			span{id: "c", parent: "b", service: "worker", name: "process", kind: "consumer", start: 20, dur: 50, refusal: "signature_expired"},
			span{id: "d", parent: "c", service: "router", name: "deliver reply", start: 30, dur: 5})})
		a := anomaliesOf(ex)
		require.Len(t, a[anomalyAfter], 1, "%v", ex.Anomalies)
		assert.Contains(t, a[anomalyAfter][0].Detail, "first lost at worker: process (session refused: signature_expired)")
		assert.Len(t, ex.Anomalies, 1, "the lost hop is told once")
		assert.Contains(t, textOf(ex), "route (deliver reply): (no route)\n")
	})
	t.Run("no session at all", func(t *testing.T) {
		ex := explore([]jTrace{mkTrace("t5",
			span{id: "a", service: "ingress", name: "ingress", dur: 100},
			span{id: "b", parent: "a", service: "router", name: "deliver reply", kind: "consumer", start: 30, dur: 5})})
		a := anomaliesOf(ex)
		require.Len(t, a[anomalyNoSession], 1)
		assert.Equal(t, noConversation, a[anomalyNoSession][0].Conversation)
	})
}

func textOf(ex *Exploration) string {
	var b bytes.Buffer
	printExploration(&b, ex)
	return b.String()
}

// Jaeger traces every query it answers, under its own service: after one
// search, the next would find those traces, which carry no session, and
// flag them. Unless --service says otherwise, Jaeger's own service is left
// out, and the output says so.
func TestJaegerOwnTracesAreLeftOut(t *testing.T) {
	gateway, err := os.ReadFile(fixtureBaggage)
	require.NoError(t, err)
	own := `{"data":[{"traceID":"0123456789abcdef0123456789abcdef","spans":[{"traceID":"0123456789abcdef0123456789abcdef",
		"spanID":"0123456789abcdef","operationName":"/api/traces","startTime":1796301000000000,"duration":300,"processID":"p1"}],
		"processes":{"p1":{"serviceName":"jaeger"}}}]}`
	var mu sync.Mutex
	searched := map[string]bool{}
	jaeger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/api/services":
			io.WriteString(w, `{"data":["gateway-gateway","gateway-router","gateway-worker","jaeger"]}`)
		case r.URL.Path == "/api/traces" && r.URL.Query().Get("service") == "jaeger":
			mu.Lock()
			searched["jaeger"] = true
			mu.Unlock()
			io.WriteString(w, own)
		case r.URL.Path == "/api/traces":
			w.Write(gateway)
		default:
			http.NotFound(w, r)
		}
	}))
	defer jaeger.Close()

	var out, errOut bytes.Buffer
	code := run([]string{"trace", "--jaeger", jaeger.URL, "--check"}, &out, &errOut, noEnv)
	assert.Equal(t, 0, code, "%s%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "not Jaeger's own traces, of service jaeger")
	assert.NotContains(t, out.String(), "no-session")
	assert.False(t, searched["jaeger"], "Jaeger's own service was searched")

	// Named, it is searched, and its sessionless trace flagged.
	out.Reset()
	errOut.Reset()
	code = run([]string{"trace", "--jaeger", jaeger.URL, "--service", "gateway-gateway,jaeger", "--check"}, &out, &errOut, noEnv)
	assert.Equal(t, 1, code, "%s%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "no-session")
	assert.NotContains(t, out.String(), "not Jaeger's own traces")
}
