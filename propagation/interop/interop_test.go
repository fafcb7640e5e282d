package interop_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// stock is what any Go service in the path runs: the stock otel-go
// propagators and nothing of sessionwire's.
var stock = otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})

var spanContext = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
	SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
	TraceFlags: trace.FlagsSampled,
	Remote:     true,
})

const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// value is a field's expected value and state.
type value struct {
	v     string
	state otelsession.State
}

func set(v string) value { return value{v, otelsession.Set} }

var (
	cleared = value{"", otelsession.Cleared}
	unset   = value{"", otelsession.Unset}
)

// session is a full session whose values are what a W3C hop could damage:
// spaces (leading and trailing too), commas, semicolons, "%" and "%20"
// written literally, "=", quotes, a backslash, a tab, non-ASCII and emoji; and
// Cleared fields.
var session = otelsession.Session{
	Platform:                      "telegram",
	Source:                        "gateway",
	ChatID:                        "-100 123,456",
	ChatType:                      "", // Cleared
	ChatName:                      "Ops %20 = night, shift — 夜勤 😀",
	ThreadID:                      "17585",
	UserID:                        "", // Cleared
	UserIDAlt:                     "@alice;admin",
	UserName:                      `Zoë "Ünïcode" 🚀 back\slash`,
	ScopeID:                       "guild=998877",
	SessionKey:                    "agent:main:telegram:group:-100 123,456:17585",
	SessionID:                     "20261202_152133_a1b2c3",
	UISessionID:                   "tab-7",
	MessageID:                     "  88121  ",
	Profile:                       "", // Cleared
	BrowserControlPrincipal:       "user:alice",
	BrowserControlTransportFamily: "cdp",
	ParentChatID:                  "a b+c;d",
	Cron:                          otelsession.CronOn,
	Cwd:                           "/srv/work/alice",
	Stateless:                     true,
}

// wantAfterHop is what a process that received session over the network
// reads: every remote field with its value and state, local fields Unset
// (they never leave the process).
var wantAfterHop = map[otelsession.Field]value{
	otelsession.FieldPlatform:                      set("telegram"),
	otelsession.FieldSource:                        set("gateway"),
	otelsession.FieldChatID:                        set("-100 123,456"),
	otelsession.FieldChatType:                      cleared,
	otelsession.FieldChatName:                      set("Ops %20 = night, shift — 夜勤 😀"),
	otelsession.FieldThreadID:                      set("17585"),
	otelsession.FieldUserID:                        cleared,
	otelsession.FieldUserIDAlt:                     set("@alice;admin"),
	otelsession.FieldUserName:                      set(`Zoë "Ünïcode" 🚀 back\slash`),
	otelsession.FieldScopeID:                       set("guild=998877"),
	otelsession.FieldSessionKey:                    set("agent:main:telegram:group:-100 123,456:17585"),
	otelsession.FieldSessionID:                     set("20261202_152133_a1b2c3"),
	otelsession.FieldUISessionID:                   unset,
	otelsession.FieldMessageID:                     set("  88121  "),
	otelsession.FieldProfile:                       cleared,
	otelsession.FieldBrowserControlPrincipal:       unset,
	otelsession.FieldBrowserControlTransportFamily: unset,
	otelsession.FieldCronSession:                   set("1"),
	otelsession.FieldParentChatID:                  set("a b+c;d"),
	otelsession.FieldCronAutoDeliverPlatform:       unset,
	otelsession.FieldCronAutoDeliverChatID:         set("-100 42"),
	otelsession.FieldCronAutoDeliverThreadID:       cleared,
	otelsession.FieldCronJobID:                     set("job 7/α"),
	otelsession.FieldCronJobOriginUserID:           set("5512345678"),
	otelsession.FieldCronJobOriginPlatform:         cleared,
}

// foreign are the application's own members, which must survive as well.
var foreign = map[string]string{"tenant": "acme corp", "app.request_id": "r-1/ü"}

// boundContext is a context as a gateway builds it: the application's own
// baggage, a trace, a whole session, cron auto-deliver targets and a cron
// job's identity.
func boundContext(t *testing.T) context.Context {
	t.Helper()
	var ms []baggage.Member
	for k, v := range foreign {
		m, err := baggage.NewMemberRaw(k, v)
		require.NoError(t, err)
		ms = append(ms, m)
	}
	b, err := baggage.New(ms...)
	require.NoError(t, err)
	ctx := baggage.ContextWithBaggage(context.Background(), b)
	ctx = trace.ContextWithSpanContext(ctx, spanContext)
	require.NoError(t, session.Validate())
	ctx = otelsession.Bind(ctx, session)
	ctx = otelsession.With(ctx, otelsession.FieldCronAutoDeliverChatID, "-100 42")
	ctx = otelsession.WithCronJob(ctx, otelsession.CronJob{ID: "job 7/α", OriginUserID: "5512345678"})
	return otelsession.With(ctx, otelsession.FieldCronAutoDeliverThreadID, "")
}

// hop sends the headers in h through the JavaScript SDK (extract, then
// inject from the extracted context) and returns what it sends on.
func hop(t *testing.T, h http.Header) (http.Header, nodeResponse) {
	t.Helper()
	headers := map[string]any{}
	for k, vs := range h {
		headers[k] = vs
	}
	resp := runNode(t, nodeRequest{Mode: "hop", Headers: headers})
	out := http.Header{}
	for k, v := range resp.Headers {
		out.Set(k, v)
	}
	return out, resp
}

func checkFields(t *testing.T, ctx context.Context, want map[otelsession.Field]value) {
	t.Helper()
	for _, f := range otelsession.Fields() {
		w, ok := want[f]
		require.True(t, ok, "no expectation for %s", f.Key())
		v, state := otelsession.Lookup(ctx, f)
		assert.Equal(t, w, value{v, state}, "%s", f.Key())
	}
}

func checkForeign(t *testing.T, ctx context.Context) {
	t.Helper()
	b := baggage.FromContext(ctx)
	for k, v := range foreign {
		assert.Equal(t, v, b.Member(k).Value(), "foreign member %s", k)
	}
}

// A session injected by the stock Go propagators, forwarded by the JavaScript
// SDK and extracted by the stock Go propagators again keeps every remote
// field's value and state (Cleared stays Cleared), the stateless mark, the
// application's members and the trace.
func TestSessionSurvivesJavaScriptHop(t *testing.T) {
	t.Parallel()
	ctx := boundContext(t)
	checkFields(t, ctx, func() map[otelsession.Field]value {
		// Before the hop the local fields are there too.
		w := map[otelsession.Field]value{}
		for f, v := range wantAfterHop {
			w[f] = v
		}
		w[otelsession.FieldUISessionID] = set("tab-7")
		w[otelsession.FieldBrowserControlPrincipal] = set("user:alice")
		w[otelsession.FieldBrowserControlTransportFamily] = set("cdp")
		return w
	}())

	h := http.Header{}
	stock.Inject(ctx, otelprop.HeaderCarrier(h))
	// Another middleware's header line beside ours: W3C allows several.
	h.Add("baggage", "app.extra=1")
	out, resp := hop(t, h)
	t.Logf("sent:      %q", h.Values("baggage"))
	t.Logf("forwarded: %q", out.Values("baggage"))

	// The JavaScript SDK itself decoded every value as Go meant it, and
	// kept the Cleared marker as one NUL character.
	for f, w := range wantAfterHop {
		if w.state == otelsession.Unset {
			assert.NotContains(t, resp.Entries, f.Key(), "JavaScript received %s", f.Key())
			continue
		}
		want := w.v
		if w.state == otelsession.Cleared {
			want = otelsession.ClearedValue
		}
		assert.Equal(t, want, resp.Entries[f.Key()], "JavaScript's view of %s", f.Key())
	}
	assert.Equal(t, "0", resp.Entries[otelsession.AsyncDeliveryKey])
	assert.Len(t, out.Values("baggage"), 1, "the JavaScript SDK joins baggage headers into one")

	readers := []struct {
		name    string
		extract func(*testing.T, http.Header) context.Context
	}{
		{"stock propagator", func(t *testing.T, h http.Header) context.Context {
			return stock.Extract(context.Background(), otelprop.HeaderCarrier(h))
		}},
		{"Inbound trusting the peer", func(t *testing.T, h http.Header) context.Context {
			in := propagation.NewInbound(propagation.TrustAll)
			ctx, err := in.Extract(context.Background(), stock, otelprop.HeaderCarrier(h), propagation.Peer{Transport: "http"})
			require.NoError(t, err)
			assert.Equal(t, uint64(1), in.Counts().Accepted)
			return ctx
		}},
	}
	for _, r := range readers {
		t.Run(r.name, func(t *testing.T) {
			got := r.extract(t, out)
			checkFields(t, got, wantAfterHop)
			assert.False(t, otelsession.AsyncDeliverySupported(got), "the stateless mark was lost")
			assert.Empty(t, otelsession.Cwd(got), "the working directory is local")
			checkForeign(t, got)
			assert.Equal(t, "1", baggage.FromContext(got).Member("app.extra").Value())
			sc := trace.SpanContextFromContext(got)
			assert.Equal(t, spanContext.TraceID(), sc.TraceID())
			assert.Equal(t, spanContext.SpanID(), sc.SpanID())
			assert.True(t, sc.IsSampled())
		})
	}
}

// Why Cleared travels as %00: the JavaScript SDK drops a member whose value
// is empty when it extracts baggage, so a Cleared field written as
// `session.chat_id=` arrives Unset one hop later (and Getenv there would fall
// back to a stale environment value), while `session.chat_id=%00` survives.
func TestEmptyMemberDoesNotSurviveJavaScriptHop(t *testing.T) {
	t.Parallel()
	key := otelsession.FieldChatID.Key()
	tests := []struct {
		name       string
		member     string // the value otel-go writes for the member
		wantHeader string // the member as the JavaScript SDK forwards it, "" when dropped
		want       otelsession.State
	}{
		{"empty value is dropped", "", "", otelsession.Unset},
		{"NUL marker survives", otelsession.ClearedValue, key + "=%00", otelsession.Cleared},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chat, err := baggage.NewMemberRaw(key, tc.member)
			require.NoError(t, err)
			other, err := baggage.NewMemberRaw("tenant", "acme")
			require.NoError(t, err)
			b, err := baggage.New(chat, other)
			require.NoError(t, err)
			ctx := baggage.ContextWithBaggage(context.Background(), b)
			_, before := otelsession.Lookup(ctx, otelsession.FieldChatID)
			require.Equal(t, otelsession.Cleared, before, "both forms read as Cleared in Go")

			h := http.Header{}
			stock.Inject(ctx, otelprop.HeaderCarrier(h))
			out, _ := hop(t, h)

			var forwarded []string
			for m := range strings.SplitSeq(out.Get("baggage"), ",") {
				if strings.HasPrefix(m, key+"=") {
					forwarded = append(forwarded, m)
				}
			}
			if tc.wantHeader == "" {
				assert.Empty(t, forwarded)
			} else {
				assert.Equal(t, []string{tc.wantHeader}, forwarded)
			}
			got := stock.Extract(context.Background(), otelprop.HeaderCarrier(out))
			_, after := otelsession.Lookup(got, otelsession.FieldChatID)
			assert.Equal(t, tc.want, after)
			assert.Equal(t, "acme", baggage.FromContext(got).Member("tenant").Value())
		})
	}
}

// The reverse direction: the JavaScript SDK builds the baggage itself
// (propagation.createBaggage, with "\u0000" for a Cleared field) and injects
// it; Go reads it through Inbound.
func TestJavaScriptBuiltSessionReadByInbound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries map[string]string
		trust   propagation.TrustFunc
		want    map[otelsession.Field]value // fields not named: Unset
		wantErr error
		counts  propagation.Counts
	}{
		{
			name: "trusted peer",
			entries: map[string]string{
				"session.platform": "discord", "session.chat_id": "-100 123,456",
				"session.thread_id": "\u0000", "session.user_name": "Zoë 😀 %41=;",
				"session.async_delivery": "0",
			},
			trust: propagation.TrustAll,
			want: map[otelsession.Field]value{
				otelsession.FieldPlatform: set("discord"), otelsession.FieldChatID: set("-100 123,456"),
				otelsession.FieldThreadID: cleared, otelsession.FieldUserName: set("Zoë 😀 %41=;"),
			},
			counts: propagation.Counts{Accepted: 1},
		},
		{
			// The JavaScript SDK writes an empty member on inject (it drops
			// them only on extract); Go reads it as Cleared.
			name:    "empty value written by JavaScript",
			entries: map[string]string{"session.chat_id": ""},
			trust:   propagation.TrustAll,
			want:    map[otelsession.Field]value{otelsession.FieldChatID: cleared},
			counts:  propagation.Counts{Accepted: 1},
		},
		{
			name:    "untrusted peer",
			entries: map[string]string{"session.chat_id": "-100 123", "session.scope_id": "forged"},
			trust:   propagation.TrustNone,
			counts:  propagation.Counts{Untrusted: 1},
		},
		{
			name:    "control characters",
			entries: map[string]string{"session.chat_id": "42", "session.thread_id": "1\r\nX-Evil: 1"},
			trust:   propagation.TrustAll,
			wantErr: propagation.ErrInvalidValue,
			counts:  propagation.Counts{Rejected: 1, InvalidValue: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			entries := map[string]string{}
			for k, v := range foreign {
				entries[k] = v
			}
			for k, v := range tc.entries {
				entries[k] = v
			}
			resp := runNode(t, nodeRequest{Mode: "build", Entries: entries, Traceparent: traceparent})
			require.NotEmpty(t, resp.Headers["baggage"], "the JavaScript SDK injected no baggage")

			h := http.Header{}
			for k, v := range resp.Headers {
				h.Set(k, v)
			}
			in := propagation.NewInbound(tc.trust)
			ctx, err := in.Extract(context.Background(), stock, otelprop.HeaderCarrier(h), propagation.Peer{Transport: "http"})
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.counts, in.Counts())

			want := map[otelsession.Field]value{}
			for _, f := range otelsession.Fields() {
				want[f] = unset
			}
			for f, v := range tc.want {
				want[f] = v
			}
			checkFields(t, ctx, want)
			_, stateless := tc.entries[otelsession.AsyncDeliveryKey]
			assert.Equal(t, !stateless, otelsession.AsyncDeliverySupported(ctx))
			checkForeign(t, ctx)
			assert.Equal(t, spanContext.TraceID(), trace.SpanContextFromContext(ctx).TraceID())
		})
	}
}

// The script also takes a header on its command line, for a person trying
// the JavaScript SDK's behaviour by hand.
func TestScriptCommandLine(t *testing.T) {
	t.Parallel()
	out := runScript(t, nil, "hop", "session.chat_id=%00, session.thread_id= ,tenant=acme", traceparent)
	assert.JSONEq(t, `{
		"headers": {"traceparent": "`+traceparent+`", "baggage": "session.chat_id=%00,tenant=acme"},
		"entries": {"session.chat_id": "\u0000", "tenant": "acme"}
	}`, string(out))
}
