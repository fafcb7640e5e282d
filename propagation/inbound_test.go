package propagation_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.uber.org/goleak"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

func TestMain(m *testing.M) {
	// Hostile input is reported to otel.Handle once per kind; the tests
	// assert on returned errors and counts, so keep the output quiet.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	goleak.VerifyTestMain(m)
}

// w3cProp is the propagator a server would install with otel.SetTextMapPropagator.
var w3cProp = otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})

// fieldSeen is one field as a handler saw it.
type fieldSeen struct {
	state otelsession.State
	value string
}

func (v fieldSeen) String() string {
	if v.state == otelsession.Set {
		return fmt.Sprintf("set %q", v.value)
	}
	return v.state.String()
}

// requestView is what one request's handler saw.
type requestView struct {
	fields    map[otelsession.Field]fieldSeen // every field, local ones too
	cwd       string
	stateless bool
	// foreign holds the baggage members that are not session members, as
	// "key=value;props" keyed by key; raw holds the same for what a plain
	// otel Baggage propagator extracts from the headers the server received.
	foreign, rawForeign map[string]string
	rawSession          map[otelsession.Field]fieldSeen // session as plain otel reads it
	nextHeader          []string                        // baggage lines the wrapped handler got
	errs                []error                         // passed to OnError
}

// unset reports the fields that are not Unset, for a failure message.
func (v requestView) notUnset() []string {
	var out []string
	for _, f := range otelsession.Fields() {
		if fv := v.fields[f]; fv.state != otelsession.Unset {
			out = append(out, f.Key()+" "+fv.String())
		}
	}
	if v.cwd != "" {
		out = append(out, "cwd "+v.cwd)
	}
	if v.stateless {
		out = append(out, otelsession.AsyncDeliveryKey+" present")
	}
	return out
}

func sessionSeen(ctx context.Context) map[otelsession.Field]fieldSeen {
	m := make(map[otelsession.Field]fieldSeen)
	for _, f := range otelsession.Fields() {
		v, st := otelsession.Lookup(ctx, f)
		m[f] = fieldSeen{st, v}
	}
	return m
}

// membersSeen is sessionSeen by the definition, each remote field read from
// its member of the baggage (absent Unset, empty or the Cleared marker
// Cleared), without the record the reads use when there is one.
func membersSeen(ctx context.Context) map[otelsession.Field]fieldSeen {
	m := make(map[otelsession.Field]fieldSeen)
	b := baggage.FromContext(ctx)
	for _, f := range otelsession.Fields() {
		if f.Scope() == otelsession.Local {
			v, st := otelsession.Lookup(ctx, f)
			m[f] = fieldSeen{st, v}
			continue
		}
		switch mem := b.Member(f.Key()); {
		case mem.Key() == "":
			m[f] = fieldSeen{otelsession.Unset, ""}
		case mem.Value() == "" || mem.Value() == otelsession.ClearedValue:
			m[f] = fieldSeen{otelsession.Cleared, ""}
		default:
			m[f] = fieldSeen{otelsession.Set, mem.Value()}
		}
	}
	return m
}

// isSessionMemberKey: the session namespace is owned, whatever the spelling.
func isSessionMemberKey(key string) bool { return otelsession.OwnedKey(key) }

func foreignOf(b baggage.Baggage) map[string]string {
	m := make(map[string]string)
	for _, mem := range b.Members() {
		if !isSessionMemberKey(mem.Key()) {
			m[mem.Key()] = mem.String()
		}
	}
	return m
}

// policyServer is a real HTTP server on 127.0.0.1 whose application handler sits
// behind httpsession.Handler and reports what it saw.
type policyServer struct {
	*httptest.Server
	policy *propagation.Inbound
	views  chan requestView
}

// startPolicyServer starts a server applying policy; configure, when not nil, can
// set fields of the http.Server (BaseContext, …) before it starts.
func startPolicyServer(t *testing.T, policy *propagation.Inbound, configure func(*http.Server)) *policyServer {
	t.Helper()
	s := &policyServer{policy: policy, views: make(chan requestView, 1)}
	var (
		mu   sync.Mutex
		errs []error
	)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		mu.Lock()
		v := requestView{
			fields:     sessionSeen(ctx),
			cwd:        otelsession.Cwd(ctx),
			stateless:  !otelsession.AsyncDeliverySupported(ctx),
			foreign:    foreignOf(baggage.FromContext(ctx)),
			nextHeader: r.Header.Values("Baggage"),
			errs:       errs,
		}
		errs = nil
		mu.Unlock()
		raw := otelprop.Baggage{}.Extract(context.Background(), otelprop.HeaderCarrier(receivedHeader(r)))
		v.rawForeign = foreignOf(baggage.FromContext(raw))
		v.rawSession = sessionSeen(raw)
		s.views <- v
		w.WriteHeader(http.StatusNoContent)
	})
	opts := []httpsession.Option{
		httpsession.WithPropagator(w3cProp),
		httpsession.WithOnError(func(_ *http.Request, err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}),
	}
	if policy != nil {
		opts = append(opts, httpsession.WithInbound(policy))
	}
	// keepRaw stores the headers as received, before Handler may rewrite
	// the ones it hands on.
	h := httpsession.Handler(app, opts...)
	keepRaw := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), receivedHeaderKey{}, r.Header.Clone())))
	})
	s.Server = httptest.NewUnstartedServer(keepRaw)
	if configure != nil {
		configure(s.Config)
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

type receivedHeaderKey struct{}

func receivedHeader(r *http.Request) http.Header {
	h, _ := r.Context().Value(receivedHeaderKey{}).(http.Header)
	return h
}

// send makes one GET request with the given baggage header lines (each one
// its own header line) and returns what the handler saw.
func (s *policyServer) send(t *testing.T, lines ...string) requestView {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) > 0 {
		req.Header["Baggage"] = lines
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatalf("request failed (did the handler panic?): %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d, want %d: the request must be served even when its session is refused", resp.StatusCode, http.StatusNoContent)
	}
	// The handler sends its requestView before the response is written.
	select {
	case v := <-s.views:
		return v
	default:
		t.Fatal("the handler did not run")
		return requestView{}
	}
}

// fullTestSession sets every field of a Session except Cron, which is on.
var fullTestSession = otelsession.Session{
	Platform: "telegram", Source: "gateway", ChatID: "-1001234567890", ChatType: "supergroup",
	ChatName: "Ops – EU", ThreadID: "17585", UserID: "u-42", UserIDAlt: "@ana",
	UserName: "Ana Lúcia", ScopeID: "guild-7", SessionKey: "agent:main:telegram:-1001234567890:17585",
	SessionID: "20261214_101010_ab12cd", UISessionID: "tab-3", MessageID: "88121",
	Profile: "default", BrowserControlPrincipal: "ana", BrowserControlTransportFamily: "cdp",
	ParentChatID: "-1001234567000", Cron: otelsession.CronOn, Cwd: "/srv/work",
}

// sessionHeaderOf is the baggage header line of s as a stock propagator
// injects it.
func sessionHeaderOf(s otelsession.Session) string {
	h := http.Header{}
	otelprop.Baggage{}.Inject(otelsession.Bind(context.Background(), s), otelprop.HeaderCarrier(h))
	return h.Get("Baggage")
}

func manyMembers(n int, format string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(format, i)
	}
	return strings.Join(parts, ",")
}

func repeatLine(n int, line string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = line
	}
	return out
}

// TestInboundHostileInput sends each named hostile input to a real server
// whose policy trusts the client (loopback), so that every refusal below is
// the input's doing, not the peer's.
func TestInboundHostileInput(t *testing.T) {
	full := sessionHeaderOf(fullTestSession)
	pad := func(n int) string { return "app.pad=" + strings.Repeat("p", n) }
	euro513 := strings.Repeat("%E2%82%AC", 171) // 513 bytes once decoded

	type want struct {
		err    error                        // nil: accepted or no session at all
		counts propagation.Counts           // the policy's counts after the request
		fields map[otelsession.Field]string // Set fields expected; nil: wholly Unset
	}
	refused := func(err error, c propagation.Counts) want {
		c.Rejected = 1
		return want{err: err, counts: c}
	}
	accepted := func(fields map[otelsession.Field]string) want {
		return want{counts: propagation.Counts{Accepted: 1}, fields: fields}
	}
	cases := []struct {
		name  string
		lines []string
		want  want
	}{
		// Size.
		{"one line over 8192 bytes", []string{full + "," + pad(8192)},
			refused(propagation.ErrBaggageTooLarge, propagation.Counts{TooLarge: 1})},
		{"several lines over 8192 bytes together", []string{full, pad(3000), pad(3000), pad(3000)},
			refused(propagation.ErrBaggageTooLarge, propagation.Counts{TooLarge: 1})},
		{"over 8192 bytes without any session member is refused too: it cannot be shown to hold none",
			[]string{pad(9000)}, refused(propagation.ErrBaggageTooLarge, propagation.Counts{TooLarge: 1})},
		{"many baggage header lines beside a session", append([]string{full}, repeatLine(500, "app.k=v")...),
			refused(propagation.ErrBaggageTooLarge, propagation.Counts{TooLarge: 1})},
		{"many baggage header lines without a session pass as otel leaves them", repeatLine(500, "app.k=v"),
			want{}},
		{"65 members in one line, the session last", []string{manyMembers(49, "app.k%d=v") + "," + full},
			refused(propagation.ErrBaggageTooLarge, propagation.Counts{TooLarge: 1})},
		{"64 members in one line, the session last, is within the limits", []string{manyMembers(48, "app.k%d=v") + "," + full},
			accepted(map[otelsession.Field]string{otelsession.FieldChatID: fullTestSession.ChatID, otelsession.FieldUserName: fullTestSession.UserName})},
		{"10,000 members", []string{"session.chat_id=c," + manyMembers(10000, "m%d=v")},
			refused(propagation.ErrBaggageTooLarge, propagation.Counts{TooLarge: 1})},

		// Malformed session members: the propagator drops them.
		{"raw space in a session value", []string{"session.platform=slack,session.chat_id=a b"},
			refused(propagation.ErrMalformedMember, propagation.Counts{Malformed: 1})},
		{"bad percent-escape in a session value", []string{"session.platform=slack,session.chat_id=%zz"},
			refused(propagation.ErrMalformedMember, propagation.Counts{Malformed: 1})},
		{"truncated percent-escape in a session value", []string{"session.chat_id=abc%4"},
			refused(propagation.ErrMalformedMember, propagation.Counts{Malformed: 1})},
		{"session key without a value", []string{"session.platform=slack,session.chat_id"},
			refused(propagation.ErrMalformedMember, propagation.Counts{Malformed: 1})},
		{"session member with a broken property", []string{"session.chat_id=c;=x"},
			refused(propagation.ErrMalformedMember, propagation.Counts{Malformed: 1})},

		// Duplicates: two values for one field.
		{"session key twice in one line", []string{"session.chat_id=a,app.x=1,session.chat_id=b"},
			refused(propagation.ErrDuplicateMember, propagation.Counts{Duplicate: 1})},
		{"session key on two lines with conflicting values", []string{"session.chat_id=a,app.x=1", "session.chat_id=b"},
			refused(propagation.ErrDuplicateMember, propagation.Counts{Duplicate: 1})},
		{"session key twice with the same value", []string{"session.chat_id=a", "session.chat_id=a"},
			refused(propagation.ErrDuplicateMember, propagation.Counts{Duplicate: 1})},
		{"a whole session sent twice", []string{full, full},
			refused(propagation.ErrDuplicateMember, propagation.Counts{Duplicate: 1})},

		// Values Bind could not have produced.
		{"invalid UTF-8 after decoding (%FF)", []string{"session.chat_id=%FFabc"},
			refused(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{"NUL inside a value", []string{"session.chat_id=a%00b"},
			refused(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{"two NULs are not the Cleared marker", []string{"session.chat_id=%00%00"},
			refused(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{"CR LF in a value", []string{"session.thread_id=1%0D%0AX-Injected: yes"},
			refused(propagation.ErrMalformedMember, propagation.Counts{Malformed: 1})},
		{"CR LF percent-encoded in a value", []string{"session.thread_id=1%0D%0AX-Injected:%20yes"},
			refused(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{"LF alone in a value", []string{"session.thread_id=1%0A2"},
			refused(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{"value over 512 bytes", []string{"session.chat_id=" + strings.Repeat("c", 513)},
			refused(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{"value over 512 bytes once decoded", []string{"session.chat_id=" + euro513},
			refused(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{"value of exactly 512 bytes", []string{"session.chat_id=" + strings.Repeat("c", 512)},
			accepted(map[otelsession.Field]string{otelsession.FieldChatID: strings.Repeat("c", 512)})},
		{"invalid async-delivery value", []string{"session.chat_id=c,session.async_delivery=1"},
			refused(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{"Cleared marker as async-delivery value", []string{"session.async_delivery=%00"},
			refused(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{"one bad value refuses the whole session", []string{strings.Replace(full, "session.thread_id=17585", "session.thread_id=17585%00", 1)},
			refused(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},

		// Local fields never come from the network.
		{"UI session id from the network", []string{"session.chat_id=c,session.ui_session_id=tab-1"},
			refused(propagation.ErrLocalField, propagation.Counts{LocalField: 1})},
		{"working directory from the network", []string{"session.cwd=%2Fetc"},
			refused(propagation.ErrLocalField, propagation.Counts{LocalField: 1})},
		{"browser-control principal from the network", []string{"session.browser_control_principal=root"},
			refused(propagation.ErrLocalField, propagation.Counts{LocalField: 1})},
		{"browser-control transport from the network", []string{"session.chat_id=c", "session.browser_control_transport_family=cdp"},
			refused(propagation.ErrLocalField, propagation.Counts{LocalField: 1})},

		// Several reasons in one carrier: each is counted.
		{"duplicate and local field together", []string{"session.chat_id=a,session.chat_id=b,session.cwd=x"},
			refused(propagation.ErrDuplicateMember, propagation.Counts{Duplicate: 1, LocalField: 1})},

		// Key confusion. The session namespace is owned: a key that, decoded
		// and case-folded, lands in it but is not a table key in its
		// canonical spelling is refused, never passed on as "not ours" (an
		// SDK that decodes or folds keys would turn it into a session key
		// one hop later). W3C allows optional whitespace around a key and
		// the OTel parser trims it, so " session.chat_id =x" IS the key.
		{"key in another case is refused", []string{"Session.Chat_ID=forged,SESSION.SCOPE_ID=g"},
			refused(propagation.ErrUnknownSessionKey, propagation.Counts{UnknownSessionKey: 1})},
		{"whitespace around a key is allowed and trimmed", []string{"app.x=1,  session.chat_id =c1 ,\tsession.platform\t=slack"},
			accepted(map[otelsession.Field]string{otelsession.FieldChatID: "c1", otelsession.FieldPlatform: "slack"})},
		{"whitespace inside a key is refused, not left for otel to drop", []string{"session. chat_id=forged"},
			refused(propagation.ErrUnknownSessionKey, propagation.Counts{UnknownSessionKey: 1})},
		{"percent-encoded key is refused (the JavaScript SDK decodes it)", []string{"session%2Echat_id=forged"},
			refused(propagation.ErrUnknownSessionKey, propagation.Counts{UnknownSessionKey: 1})},
		{"doubly percent-encoded key is refused", []string{"session%252Echat_id=forged,session.chat_id=c"},
			refused(propagation.ErrUnknownSessionKey, propagation.Counts{UnknownSessionKey: 1})},
		{"unknown key under the session prefix is refused", []string{"session.admin=1,session.chat_id=c"},
			refused(propagation.ErrUnknownSessionKey, propagation.Counts{UnknownSessionKey: 1})},

		// Controls: what must pass.
		{"Cleared marker alone is Cleared", []string{"session.chat_id=%00,session.platform=slack"},
			accepted(map[otelsession.Field]string{otelsession.FieldPlatform: "slack"})},
		{"stateless channel", []string{"session.chat_id=c,session.async_delivery=0"},
			accepted(map[otelsession.Field]string{otelsession.FieldChatID: "c"})},
		{"no baggage at all", nil, want{}},
		{"only foreign baggage", []string{"app.tenant=acme,app.x=1;p=q"}, want{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startPolicyServer(t, propagation.NewInbound(propagation.TrustLoopback()), nil)
			v := s.send(t, tc.lines...)

			if got := s.policy.Counts(); got != tc.want.counts {
				t.Errorf("counts = %+v, want %+v", got, tc.want.counts)
			}
			switch {
			case tc.want.err == nil && len(v.errs) > 0:
				t.Errorf("OnError got %v, want no call", v.errs)
			case tc.want.err != nil && len(v.errs) != 1:
				t.Errorf("OnError called %d times, want once with %v", len(v.errs), tc.want.err)
			case tc.want.err != nil && !errors.Is(v.errs[0], tc.want.err):
				t.Errorf("OnError got %v, want an error wrapping %v", v.errs[0], tc.want.err)
			}

			if tc.want.fields == nil {
				if got := v.notUnset(); len(got) > 0 {
					t.Errorf("session not wholly Unset: %v", got)
				}
				for _, l := range v.nextHeader {
					if b, _ := baggage.Parse(l); baggageHasSession(b) {
						t.Errorf("wrapped handler got a session member in its baggage header: %q", l)
					}
				}
			} else {
				// An accepted session is exactly what plain otel extracts.
				for _, f := range otelsession.Fields() {
					if got, raw := v.fields[f], v.rawSession[f]; got != raw {
						t.Errorf("%s = %v, plain otel extracts %v", f, got, raw)
					}
				}
				for f, want := range tc.want.fields {
					if got := v.fields[f]; got != (fieldSeen{otelsession.Set, want}) {
						t.Errorf("%s = %v, want set %.40q", f, got, want)
					}
				}
			}
			if !sameMembers(v.foreign, v.rawForeign) {
				t.Errorf("foreign members = %v, plain otel extracts %v", v.foreign, v.rawForeign)
			}
		})
	}
}

func baggageHasSession(b baggage.Baggage) bool {
	for _, m := range b.Members() {
		if isSessionMemberKey(m.Key()) {
			return true
		}
	}
	return false
}

func sameMembers(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Members past the 64th make the OTel SDK drop members in map order, so
// without a rule of its own the policy would accept the same header on some
// requests and refuse it on others.
func TestInboundTooManyMembersIsRefusedEveryTime(t *testing.T) {
	header := http.Header{"Baggage": {sessionHeaderOf(otelsession.Session{Platform: "slack", ChatID: "C1"}), manyMembers(60, "app.k%d=v")}}
	policy := propagation.NewInbound(propagation.TrustAll)
	const n = 200
	for range n {
		ctx, err := policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(header), propagation.Peer{Transport: "test"})
		if !errors.Is(err, propagation.ErrBaggageTooLarge) {
			t.Fatalf("err = %v, want %v", err, propagation.ErrBaggageTooLarge)
		}
		if _, st := otelsession.Lookup(ctx, otelsession.FieldChatID); st != otelsession.Unset {
			t.Fatalf("chat id %v after a refusal", st)
		}
	}
	if got := policy.Counts(); got.Rejected != n || got.TooLarge != n || got.Accepted != 0 {
		t.Errorf("counts = %+v, want %d rejected as too large", got, n)
	}
}

// The OTel parser turns each byte that is not UTF-8 into U+FFFD, which is
// nine bytes once encoded again: three lines well under 8192 bytes can then
// exceed it, and the SDK drops members in map order.
func TestInboundExpansionPastTheLimitIsRefusedEveryTime(t *testing.T) {
	bad := strings.Repeat("%FF", 700) // 2100 bytes raw, 6300 re-encoded
	header := http.Header{"Baggage": {
		sessionHeaderOf(otelsession.Session{Platform: "slack", ChatID: "C1"}),
		"app.a=" + bad, "app.b=" + bad,
	}}
	policy := propagation.NewInbound(propagation.TrustAll)
	const n = 200
	for range n {
		ctx, err := policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(header), propagation.Peer{Transport: "test"})
		if !errors.Is(err, propagation.ErrBaggageTooLarge) {
			t.Fatalf("err = %v, want %v", err, propagation.ErrBaggageTooLarge)
		}
		if _, st := otelsession.Lookup(ctx, otelsession.FieldChatID); st != otelsession.Unset {
			t.Fatalf("chat id %v after a refusal", st)
		}
	}
}

// One line grows past the limit the same way. The parser keeps its
// members in order until the limit, so the session was accepted with the
// application's members after it silently dropped, or, written after them,
// refused as malformed: whether a member survived depended on where it was.
func TestInboundOneLineExpandingPastTheLimitIsTooLarge(t *testing.T) {
	bad := strings.Repeat("%FF", 1300) // 3900 bytes raw, 11700 re-encoded
	session := sessionHeaderOf(otelsession.Session{Platform: "slack", ChatID: "C1"})
	for name, line := range map[string]string{
		"session first": session + ",app.a=" + bad + ",app.keep=1",
		"session last":  "app.a=" + bad + ",app.keep=1," + session,
	} {
		t.Run(name, func(t *testing.T) {
			policy := propagation.NewInbound(propagation.TrustAll)
			ctx, err := policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(http.Header{"Baggage": {line}}), propagation.Peer{Transport: "test"})
			if !errors.Is(err, propagation.ErrBaggageTooLarge) {
				t.Fatalf("err = %v, want %v", err, propagation.ErrBaggageTooLarge)
			}
			if _, st := otelsession.Lookup(ctx, otelsession.FieldChatID); st != otelsession.Unset {
				t.Fatalf("chat id %v after a refusal", st)
			}
		})
	}
}

func TestInboundTrust(t *testing.T) {
	header := sessionHeaderOf(otelsession.Session{Platform: "slack", ChatID: "C1", ThreadID: "T1"}) + ",app.tenant=acme"
	cases := []struct {
		name   string
		policy *propagation.Inbound
		trust  bool
	}{
		{"default trusts nobody", nil, false},
		{"NewInbound(nil) trusts nobody", propagation.NewInbound(nil), false},
		{"TrustNone", propagation.NewInbound(propagation.TrustNone), false},
		{"TrustLoopback", propagation.NewInbound(propagation.TrustLoopback()), true},
		{"TrustPrefixes holding 127.0.0.0/8", propagation.NewInbound(propagation.TrustPrefixes(netip.MustParsePrefix("127.0.0.0/8"))), true},
		{"TrustPrefixes holding 127.0.0.1/32", propagation.NewInbound(propagation.TrustPrefixes(netip.MustParsePrefix("127.0.0.1/32"))), true},
		{"TrustPrefixes elsewhere", propagation.NewInbound(propagation.TrustPrefixes(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128"))), false},
		{"TrustAll", propagation.NewInbound(propagation.TrustAll), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startPolicyServer(t, tc.policy, nil)
			v := s.send(t, header)
			if len(v.errs) > 0 {
				t.Errorf("OnError got %v: an untrusted session is not an error", v.errs)
			}
			if got := v.foreign["app.tenant"]; got != "app.tenant=acme" {
				t.Errorf("foreign member = %q, want it passed whatever the trust", got)
			}
			thread := v.fields[otelsession.FieldThreadID]
			if tc.trust {
				if thread != (fieldSeen{otelsession.Set, "T1"}) {
					t.Errorf("thread id = %v, want set \"T1\" from a trusted peer", thread)
				}
			} else if got := v.notUnset(); len(got) > 0 {
				t.Errorf("untrusted peer's session reached the handler: %v", got)
			}
			if tc.policy == nil {
				return // the default policy is private to the handler
			}
			want := propagation.Counts{Untrusted: 1}
			if tc.trust {
				want = propagation.Counts{Accepted: 1}
			}
			if got := tc.policy.Counts(); got != want {
				t.Errorf("counts = %+v, want %+v", got, want)
			}
		})
	}
}

// TrustFunc sees the connection's address and the request's Host.
func TestInboundPeer(t *testing.T) {
	var (
		mu   sync.Mutex
		peer propagation.Peer
	)
	trust := func(_ context.Context, p propagation.Peer) bool {
		mu.Lock()
		defer mu.Unlock()
		peer = p
		return true
	}
	s := startPolicyServer(t, propagation.NewInbound(trust), nil)
	s.send(t, "session.chat_id=c")
	mu.Lock()
	defer mu.Unlock()
	host := strings.TrimPrefix(s.URL, "http://")
	if want := (propagation.Peer{Transport: "http", Addr: netip.MustParseAddr("127.0.0.1"), Name: host}); peer != want {
		t.Errorf("peer = %+v, want %+v", peer, want)
	}
}

// A trusted peer's session arrives whole: all sixteen remote fields with
// their values, Cleared ones as Cleared; local fields never travel.
func TestInboundTrustedSessionArrivesWhole(t *testing.T) {
	sent := fullTestSession
	sent.ChatName, sent.UserIDAlt, sent.Profile = "", "", "" // Cleared
	ctx := otelsession.Bind(context.Background(), sent)
	header := sessionHeaderOf(sent)
	if n := strings.Count(header, "session."); n != 16 {
		t.Fatalf("a full session has %d members on the wire, want 16: %s", n, header)
	}
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateless=%v", stateless), func(t *testing.T) {
			s := sent
			s.Stateless = stateless
			sctx := otelsession.Bind(context.Background(), s)
			srv := startPolicyServer(t, propagation.NewInbound(propagation.TrustLoopback()), nil)
			v := srv.send(t, sessionHeaderOf(s))
			for _, f := range otelsession.Fields() {
				want := fieldSeen{otelsession.Unset, ""}
				if f.Scope() == otelsession.Remote {
					val, st := otelsession.Lookup(sctx, f)
					want = fieldSeen{st, val}
				}
				if got := v.fields[f]; got != want {
					t.Errorf("%s = %v, want %v", f, got, want)
				}
			}
			if v.cwd != "" {
				t.Errorf("cwd = %q: the working directory never travels", v.cwd)
			}
			if v.stateless != stateless {
				t.Errorf("stateless = %v, want %v", v.stateless, stateless)
			}
			if got := srv.policy.Counts(); got != (propagation.Counts{Accepted: 1}) {
				t.Errorf("counts = %+v", got)
			}
		})
	}
	for _, f := range []otelsession.Field{otelsession.FieldChatName, otelsession.FieldUserIDAlt, otelsession.FieldProfile} {
		if _, st := otelsession.Lookup(ctx, f); st != otelsession.Cleared {
			t.Fatalf("test setup: %s is %v, want cleared", f, st)
		}
	}
}

// A request starts from the server's base context; a session bound there (by
// BaseContext or ConnContext) must never become the request's.
func TestInboundNeverInheritsTheServerContextSession(t *testing.T) {
	// A whole session (Bind puts every remote field into the baggage), and
	// each kind of state that lives beside the baggage on its own, without
	// any session member in the baggage.
	serverSessions := map[string]func(context.Context) context.Context{
		"whole": func(ctx context.Context) context.Context {
			return otelsession.Bind(ctx, otelsession.Session{Platform: "discord", ChatID: "server-chat", ThreadID: "server-thread",
				UISessionID: "server-tab", BrowserControlPrincipal: "server", Cwd: "/server", Stateless: true})
		},
		"local field only": func(ctx context.Context) context.Context {
			return otelsession.With(ctx, otelsession.FieldUISessionID, "server-tab")
		},
		"working directory only": func(ctx context.Context) context.Context { return otelsession.WithCwd(ctx, "/server") },
	}
	hooks := map[string]func(func(context.Context) context.Context) func(*http.Server){
		"BaseContext": func(serverSession func(context.Context) context.Context) func(*http.Server) {
			return func(s *http.Server) {
				s.BaseContext = func(net.Listener) context.Context { return serverSession(context.Background()) }
			}
		},
		"ConnContext": func(serverSession func(context.Context) context.Context) func(*http.Server) {
			return func(s *http.Server) {
				s.ConnContext = func(ctx context.Context, _ net.Conn) context.Context { return serverSession(ctx) }
			}
		},
	}
	for hookName, hookOf := range hooks {
		for sessionName, serverSession := range serverSessions {
			name, hook := hookName+"/"+sessionName, hookOf(serverSession)
			for _, trust := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/trusted=%v", name, trust), func(t *testing.T) {
					t.Parallel()
					trustFn := propagation.TrustNone
					if trust {
						trustFn = propagation.TrustAll
					}
					s := startPolicyServer(t, propagation.NewInbound(trustFn), hook)

					if got := s.send(t).notUnset(); len(got) > 0 {
						t.Errorf("request without baggage inherited: %v", got)
					}
					if got := s.send(t, "app.tenant=acme").notUnset(); len(got) > 0 {
						t.Errorf("request with foreign baggage inherited: %v", got)
					}
					v := s.send(t, "session.platform=slack")
					wantPlatform := fieldSeen{otelsession.Unset, ""}
					if trust {
						wantPlatform = fieldSeen{otelsession.Set, "slack"}
					}
					if got := v.fields[otelsession.FieldPlatform]; got != wantPlatform {
						t.Errorf("platform = %v, want %v", got, wantPlatform)
					}
					v.fields[otelsession.FieldPlatform] = fieldSeen{}
					if got := v.notUnset(); len(got) > 0 {
						t.Errorf("request with a session member inherited: %v", got)
					}
				})
			}
		}
	}
}

// valuesRecorder is a propagator of another format that reads every value
// of one header, through Values when the carrier has it.
type valuesRecorder struct {
	key  string
	seen *[]string
}

func (v valuesRecorder) Inject(context.Context, otelprop.TextMapCarrier) {}
func (v valuesRecorder) Fields() []string                                { return []string{v.key} }
func (v valuesRecorder) Extract(ctx context.Context, c otelprop.TextMapCarrier) context.Context {
	if vg, ok := c.(otelprop.ValuesGetter); ok {
		*v.seen = vg.Values(v.key)
	} else {
		*v.seen = []string{c.Get(v.key)}
	}
	return ctx
}

// Inbound.Extract hands the propagator a header without its Values method
// when every entry has one value, so that the W3C propagator parses the
// baggage line once; a propagator of another format must still see every
// value of a header that has several, and the session must come through
// either way.
func TestInboundKeepsEveryValueOfAMultiValuedHeader(t *testing.T) {
	full := sessionHeaderOf(fullTestSession)
	for _, tc := range []struct {
		name   string
		header http.Header
		want   []string
	}{
		{"one value each", http.Header{"Baggage": {full}, "X-Vendor": {"a"}}, []string{"a"}},
		{"a second value elsewhere", http.Header{"Baggage": {full}, "X-Vendor": {"a", "b"}}, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen []string
			prop := otelprop.NewCompositeTextMapPropagator(otelprop.Baggage{}, valuesRecorder{key: "X-Vendor", seen: &seen})
			ctx, err := propagation.NewInbound(propagation.TrustAll).Extract(context.Background(), prop,
				otelprop.HeaderCarrier(tc.header), propagation.Peer{Transport: "http"})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(seen, ",") != strings.Join(tc.want, ",") {
				t.Errorf("the other propagator read %q, want %q", seen, tc.want)
			}
			if v, st := otelsession.Lookup(ctx, otelsession.FieldThreadID); st != otelsession.Set || v != fullTestSession.ThreadID {
				t.Errorf("thread id %q (%v) after extract", v, st)
			}
		})
	}
}

// multiCarrier is a carrier of several values per key, such as a queue
// transport's, that says whether it holds a second value anywhere.
type multiCarrier struct {
	m      map[string][]string
	claims bool // what SingleValued answers
}

func (c multiCarrier) Get(key string) string {
	if vs := c.m[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}
func (c multiCarrier) Set(key, value string)      { c.m[key] = []string{value} }
func (c multiCarrier) Keys() []string             { return slices.Collect(maps.Keys(c.m)) }
func (c multiCarrier) Values(key string) []string { return c.m[key] }
func (c multiCarrier) SingleValued() bool         { return c.claims }

// A carrier with Values that reports every key single-valued is extracted
// through Get alone; one that does not keeps Values for every propagator.
func TestInboundAsksACarrierWhetherItIsSingleValued(t *testing.T) {
	full := sessionHeaderOf(fullTestSession)
	for _, tc := range []struct {
		name   string
		claims bool
		want   []string
	}{
		{"says single-valued: read through Get", true, []string{"a"}},
		{"does not: every value through Values", false, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen []string
			prop := otelprop.NewCompositeTextMapPropagator(otelprop.Baggage{}, valuesRecorder{key: "x-vendor", seen: &seen})
			c := multiCarrier{m: map[string][]string{"baggage": {full}, "x-vendor": {"a", "b"}}, claims: tc.claims}
			ctx, err := propagation.NewInbound(propagation.TrustAll).Extract(context.Background(), prop, c, propagation.Peer{Transport: "queue"})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(seen, ",") != strings.Join(tc.want, ",") {
				t.Errorf("the other propagator read %q, want %q", seen, tc.want)
			}
			if v, st := otelsession.Lookup(ctx, otelsession.FieldThreadID); st != otelsession.Set || v != fullTestSession.ThreadID {
				t.Errorf("thread id %q (%v) after extract", v, st)
			}
		})
	}
}

// memberAdder is a propagator of another format that puts one member into
// the extracted baggage, after whatever ran before it.
type memberAdder struct{ key, value string }

func (memberAdder) Inject(context.Context, otelprop.TextMapCarrier) {}
func (memberAdder) Fields() []string                                { return nil }
func (a memberAdder) Extract(ctx context.Context, _ otelprop.TextMapCarrier) context.Context {
	m, err := baggage.NewMemberRaw(a.key, a.value)
	if err != nil {
		panic(err)
	}
	b, err := baggage.FromContext(ctx).SetMember(m)
	if err != nil {
		panic(err)
	}
	return baggage.ContextWithBaggage(ctx, b)
}

// The policy judges the session members the propagator extracted, not only
// those of the baggage line: a propagator of another format beside the W3C
// one that adds a member, or replaces one the line held, is judged on what
// it put there, one baggage line or several, whatever the carrier.
func TestInboundJudgesWhatAnotherPropagatorExtracted(t *testing.T) {
	line := "session.platform=slack,session.chat_id=C1"
	for _, tc := range []struct {
		name    string
		add     memberAdder
		wantErr error
		chat    string
	}{
		{"an invalid value the line did not name", memberAdder{"session.thread_id", "1\x002"}, propagation.ErrInvalidValue, ""},
		{"a valid value the line did not name", memberAdder{"session.thread_id", "17"}, nil, "C1"},
		{"the line's last member replaced", memberAdder{"session.chat_id", "C2"}, nil, "C2"},
		{"the line's first member replaced by an invalid value", memberAdder{"session.platform", "a\x00"}, propagation.ErrInvalidValue, ""},
		{"a local field", memberAdder{"session.ui_session_id", "tab"}, propagation.ErrLocalField, ""},
	} {
		for _, carrier := range []struct {
			name string
			c    otelprop.TextMapCarrier
		}{
			{"MapCarrier", otelprop.MapCarrier{"baggage": line}},
			{"HeaderCarrier", otelprop.HeaderCarrier{"Baggage": {line}}},
		} {
			t.Run(tc.name+"/"+carrier.name, func(t *testing.T) {
				prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}, tc.add)
				ctx, err := propagation.NewInbound(propagation.TrustAll).Extract(context.Background(), prop, carrier.c, propagation.Peer{Transport: "test"})
				if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				if v, _ := otelsession.Lookup(ctx, otelsession.FieldChatID); v != tc.chat {
					t.Errorf("chat id %q, want %q", v, tc.chat)
				}
			})
		}
	}
}

// A write of local fields alone (the working directory, say) over a worker's
// context keeps its reads on the record the inbound policy left, also when
// the context held a session and baggage of its own before the extraction,
// whose local state (recording a baggage the context no longer holds) the
// write copies.
func TestALocalWriteKeepsTheInboundRecord(t *testing.T) {
	wire := otelprop.MapCarrier{}
	otelprop.Baggage{}.Inject(otelsession.Bind(context.Background(), fullTestSession), wire)
	app, err := baggage.Parse("app.tenant=acme")
	if err != nil {
		t.Fatal(err)
	}
	held := otelsession.Bind(baggage.ContextWithBaggage(context.Background(), app),
		otelsession.Session{Platform: "slack", ChatID: "C-other"})
	in := propagation.NewInbound(propagation.TrustAll)
	for name, base := range map[string]context.Context{"a fresh context": context.Background(), "a context holding a session": held} {
		ctx, err := in.Extract(base, otelprop.Baggage{}, wire, propagation.Peer{Transport: "test"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ctx = otelsession.WithCwd(ctx, "/srv/work")
		if sessionstate.RecordOf(ctx, baggage.FromContext(ctx)) == nil {
			t.Errorf("%s: after a local write the reads no longer find the session's record", name)
		}
		if v, st := otelsession.Lookup(ctx, otelsession.FieldChatID); v != fullTestSession.ChatID || st != otelsession.Set {
			t.Errorf("%s: chat id %q (%v), want %q", name, v, st, fullTestSession.ChatID)
		}
	}
}
