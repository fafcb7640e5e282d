package propagation_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

var httpDest = func(raw string) propagation.Dest {
	u, _ := url.Parse(raw)
	return propagation.Dest{Transport: propagation.TransportHTTP, Name: u.Host, URL: u}
}

// sessionKeysIn returns the members of every baggage entry of h, in any
// spelling, whose key is in the session namespace.
func sessionKeysIn(h http.Header) []string {
	var keys []string
	for k, vs := range h {
		if !strings.EqualFold(k, "baggage") {
			continue
		}
		for _, v := range vs {
			for m := range strings.SplitSeq(v, ",") {
				key, _, _ := strings.Cut(m, "=")
				key, _, _ = strings.Cut(key, ";")
				if key = strings.TrimSpace(key); otelsession.OwnedKey(key) {
					keys = append(keys, key)
				}
			}
		}
	}
	return keys
}

// A baggage header the application wrote itself, in any spelling and on
// several lines, reaches a refused host without its session members, and an
// allowed host receives one line: ours, signed, never the caller's beside it.
func TestOutboundRemovesPrewrittenSession(t *testing.T) {
	t.Parallel()
	signer := mustSigner(t, testKey("k1"), signTime)
	verifier := mustVerifier(t, signTime, testKey("k1"))
	allowed := "https://notify.internal/v1"
	out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{"notify.internal"}}),
		propagation.WithSigner(signer))
	prewritten := func() http.Header {
		return http.Header{
			"Baggage": {"session.chat_id=forged,app.tenant=acme", "session.user_id=u9"},
			"baggage": {"session.thread_id=t9,app.lower=1"},
			"BAGGAGE": {"SESSION.scope_id=g,session%2Ekey=k,app.upper=1,\vsession.user_id_alt=v"}, // the OTel parser trims \v
		}
	}
	mine := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C1", ThreadID: "mine"})
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		dest     string
		wantMine bool
	}{
		{"refused host, session in the context", mine, "https://api.partner.example/x", false},
		{"refused host, no session in the context", context.Background(), "https://api.partner.example/x", false},
		{"allowed host, session in the context", mine, allowed, true},
		{"allowed host, no session in the context", context.Background(), allowed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := prewritten()
			require.NoError(t, out.Inject(tc.ctx, w3cProp, otelprop.HeaderCarrier(h), httpDest(tc.dest)))
			got := sessionKeysIn(h)
			if !tc.wantMine {
				assert.Empty(t, got, "session members in %v", h)
				return
			}
			n := 0
			for k := range h {
				if strings.EqualFold(k, "baggage") {
					n += len(h[k])
				}
			}
			assert.Equal(t, 1, n, "one baggage line: %v", h)
			ctx := otelprop.Baggage{}.Extract(context.Background(), otelprop.HeaderCarrier(h))
			require.NoError(t, verifier.Verify(ctx, ""), "the line is ours, signed")
			v, _ := otelsession.Lookup(ctx, otelsession.FieldThreadID)
			assert.Equal(t, "mine", v)
			_, st := otelsession.Lookup(ctx, otelsession.FieldUserID)
			assert.Equal(t, otelsession.Cleared, st, "nothing of the caller's session")
		})
	}
}

// Every transport has one default: no session leaves for the network, and
// child processes receive it.
func TestOutboundDefault(t *testing.T) {
	t.Parallel()
	ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "C1"})
	for _, o := range []*propagation.Outbound{nil, propagation.NewOutbound(nil)} {
		for _, d := range []propagation.Dest{
			httpDest("https://notify.internal/"),
			{Transport: propagation.TransportNATS, Name: "gw.jobs"},
			{Transport: propagation.TransportKafka, Name: "chat-in"},
			{Transport: propagation.TransportAMQP, Name: "chat"},
			{Transport: propagation.TransportGRPC, Name: "notify.internal"},
		} {
			c := otelprop.MapCarrier{}
			require.NoError(t, o.Inject(ctx, w3cProp, c, d))
			assert.NotContains(t, c.Get("baggage"), "session.", "%s", d.Transport)
		}
		c := otelprop.MapCarrier{}
		require.NoError(t, o.Inject(ctx, w3cProp, c, propagation.Dest{Transport: propagation.TransportEnv}))
		assert.Contains(t, c.Get("baggage"), "session.chat_id=C1")
	}
}

func TestAllowNames(t *testing.T) {
	t.Parallel()
	allow := propagation.AllowNames(propagation.TransportNATS, "gw.>", "chat.*.in", "exact")
	for name, want := range map[string]bool{
		"gw.jobs": true, "gw.jobs.telegram": true, "gw": false, "gwx.jobs": false,
		"chat.a.in": true, "chat.a.b.in": false, "chat.a": false, "exact": true, "exact.more": false, "": false,
	} {
		assert.Equal(t, want, allow(context.Background(), propagation.Dest{Transport: propagation.TransportNATS, Name: name}), name)
	}
	assert.False(t, allow(context.Background(), propagation.Dest{Transport: propagation.TransportKafka, Name: "exact"}),
		"a name is allowed on its own transport only")
}

// Members in the session namespace that the table does not know (in any
// spelling) never leave, even for an allowed destination.
func TestOutboundDropsStrays(t *testing.T) {
	t.Parallel()
	ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "C1"})
	b := baggage.FromContext(ctx)
	for _, k := range []string{"session%2Ethread_id", "SESSION.scope_id", "session.future", "app.tenant"} {
		m, err := baggage.NewMemberRaw(k, "x")
		require.NoError(t, err)
		b, err = b.SetMember(m)
		require.NoError(t, err)
	}
	ctx = baggage.ContextWithBaggage(ctx, b)
	c := otelprop.MapCarrier{}
	require.NoError(t, propagation.NewOutbound(propagation.AllowAll).Inject(ctx, w3cProp, c, propagation.Dest{Transport: "nats", Name: "a"}))
	got, err := baggage.Parse(c.Get("baggage"))
	require.NoError(t, err)
	for _, m := range got.Members() {
		if otelsession.OwnedKey(m.Key()) {
			_, known := otelsession.SpecOf(m.Key())
			assert.True(t, known, "stray %s was sent", m.Key())
		}
	}
	assert.Equal(t, "C1", got.Member("session.chat_id").Value())
	assert.Equal(t, "x", got.Member("app.tenant").Value())
}

// A value written into the baggage by code other than otelsession's writers,
// that no edge would accept, is withheld with its session rather than sent to
// be refused one hop later.
func TestOutboundWithholdsInvalidValues(t *testing.T) {
	t.Parallel()
	m, err := baggage.NewMemberRaw("session.thread_id", "1\n2")
	require.NoError(t, err)
	b, err := baggage.New(m)
	require.NoError(t, err)
	ctx := baggage.ContextWithBaggage(context.Background(), b)
	out := propagation.NewOutbound(propagation.AllowAll)
	c := otelprop.MapCarrier{}
	err = out.Inject(ctx, w3cProp, c, propagation.Dest{Transport: "nats", Name: "a"})
	require.ErrorIs(t, err, propagation.ErrInvalidValue)
	assert.NotContains(t, c.Get("baggage"), "session.")
	assert.Equal(t, propagation.OutboundCounts{Withheld: 1, Invalid: 1}, out.Counts())
}

// A session bound with otelsession is not read back on the way out, but only
// while its baggage is the very one Bind built: a value refused by every edge
// written over it afterwards, by any code, is still found and withheld.
func TestOutboundRechecksBaggageReplacedAfterBind(t *testing.T) {
	t.Parallel()
	bound := otelsession.Bind(context.Background(), otelsession.Session{Platform: "telegram", ChatID: "C1", ThreadID: "7"})
	out := propagation.NewOutbound(propagation.AllowAll)
	dest := propagation.Dest{Transport: "nats", Name: "a"}

	c := otelprop.MapCarrier{}
	require.NoError(t, out.Inject(bound, w3cProp, c, dest))
	assert.Contains(t, c.Get("baggage"), "session.thread_id=7")

	m, err := baggage.NewMemberRaw("session.thread_id", "1\n2")
	require.NoError(t, err)
	b, err := baggage.FromContext(bound).SetMember(m)
	require.NoError(t, err)
	c = otelprop.MapCarrier{}
	err = out.Inject(baggage.ContextWithBaggage(bound, b), w3cProp, c, dest)
	require.ErrorIs(t, err, propagation.ErrInvalidValue)
	assert.NotContains(t, c.Get("baggage"), "session.")
	assert.Equal(t, propagation.OutboundCounts{Sent: 1, Withheld: 1, Invalid: 1}, out.Counts())
}

// The value rule is one rule: whatever Bind binds, a receiving edge accepts,
// and whatever an edge refuses, Bind refuses too.
func FuzzValueRuleAgreement(f *testing.F) {
	for _, v := range []string{"17585", "a\nb", "a\rb", "tab\there", "\x7f", "\uFFFD", "\xff", "é", "a b+c;d,e=f",
		strings.Repeat("x", 512), strings.Repeat("x", 513), strings.Repeat("名", 100), "%00", "\x00"} {
		f.Add(v, uint8(otelsession.FieldThreadID))
		f.Add(v, uint8(otelsession.FieldChatName))
	}
	f.Fuzz(func(t *testing.T, v string, fi uint8) {
		fields := otelsession.Fields()
		f := fields[int(fi)%len(fields)]
		if f.Scope() == otelsession.Local || v == "" {
			return
		}
		s := otelsession.Session{}
		var bound context.Context
		if f.InSession() {
			setField(&s, f, v)
			bound = otelsession.Bind(context.Background(), s)
		} else {
			bound = otelsession.With(context.Background(), f, v)
		}
		boundValue, st := otelsession.Lookup(bound, f)

		// What Bind bound goes over the wire, then through an edge.
		h := http.Header{}
		otelprop.Baggage{}.Inject(bound, otelprop.HeaderCarrier(h))
		ctx, err := propagation.NewInbound(propagation.TrustAll).Extract(context.Background(), otelprop.Baggage{},
			otelprop.HeaderCarrier(h), propagation.Peer{Transport: "fuzz"})
		if err != nil {
			t.Fatalf("an edge refused what Bind bound for %s (%q): %v", f, boundValue, err)
		}
		got, gotSt := otelsession.Lookup(ctx, f)
		if got != boundValue || gotSt != st {
			t.Fatalf("%s: bound %q (%s), the edge read %q (%s)", f, boundValue, st, got, gotSt)
		}

		// The raw value, sent by a foreign peer: refused by the edge exactly
		// when Bind would refuse it (display values are cut or dropped the
		// same way on both sides).
		_, verr := otelsession.ValidateValue(f.Spec(), v)
		m, merr := baggage.NewMemberRaw(f.Key(), v)
		if merr != nil || strings.ContainsRune(v, 0) && v != "\x00" {
			return
		}
		raw, _ := baggage.New(m)
		h2 := http.Header{"Baggage": {raw.String()}}
		if len(raw.String()) == 0 {
			return
		}
		ctx, err = propagation.NewInbound(propagation.TrustAll).Extract(context.Background(), otelprop.Baggage{},
			otelprop.HeaderCarrier(h2), propagation.Peer{Transport: "fuzz"})
		refusedByBind := errors.Is(verr, otelsession.ErrInvalidValue)
		if v == "\x00" {
			refusedByBind = false // the Cleared marker on the wire
		}
		if refusedByBind != errors.Is(err, propagation.ErrInvalidValue) {
			t.Fatalf("%s = %q: Bind refuses: %v (%v), the edge refuses: %v", f, v, refusedByBind, verr, err)
		}
		if err == nil && v != "\x00" && utf8.ValidString(v) {
			got, _ := otelsession.Lookup(ctx, f)
			want, _ := otelsession.ValidateValue(f.Spec(), v)
			if want == "" {
				want = "" // dropped: Cleared
			}
			if got != want {
				t.Fatalf("%s = %q: the edge read %q, Bind would bind %q", f, v, got, want)
			}
		}
	})
}

// setField sets f in s, for the fields a Session holds.
func setField(s *otelsession.Session, f otelsession.Field, v string) {
	switch f {
	case otelsession.FieldPlatform:
		s.Platform = v
	case otelsession.FieldSource:
		s.Source = v
	case otelsession.FieldChatID:
		s.ChatID = v
	case otelsession.FieldChatType:
		s.ChatType = v
	case otelsession.FieldChatName:
		s.ChatName = v
	case otelsession.FieldThreadID:
		s.ThreadID = v
	case otelsession.FieldUserID:
		s.UserID = v
	case otelsession.FieldUserIDAlt:
		s.UserIDAlt = v
	case otelsession.FieldUserName:
		s.UserName = v
	case otelsession.FieldScopeID:
		s.ScopeID = v
	case otelsession.FieldSessionKey:
		s.SessionKey = v
	case otelsession.FieldSessionID:
		s.SessionID = v
	case otelsession.FieldMessageID:
		s.MessageID = v
	case otelsession.FieldProfile:
		s.Profile = v
	case otelsession.FieldParentChatID:
		s.ParentChatID = v
	case otelsession.FieldCronSession:
		s.Cron = otelsession.CronOn
	}
}

// FuzzOutbound: whatever a carrier already holds, and whatever the context's
// baggage, no member in the session namespace ever reaches a destination the
// policy refuses, and an allowed one receives at most the table's keys.
func FuzzOutbound(f *testing.F) {
	f.Add("session.chat_id=x,app.a=1", "baggage", "session.thread_id=y", true, false)
	f.Add("Session.Chat_ID=x", "BAGGAGE", "app.x=1", false, true)
	f.Add("session%2Echat_id=x;p=1,  session.key =k", "Baggage", "session%252Ekey=z", true, true)
	f.Add("a=1,,session.sig=v1.k.1.x", "bAgGaGe", "session.future=1,session.thread_id=%0A", false, false)
	f.Fuzz(func(t *testing.T, pre, spelling, ctxBaggage string, withSession, allow bool) {
		h := http.Header{}
		if strings.EqualFold(spelling, "baggage") {
			h[spelling] = []string{pre}
		}
		h.Add("Baggage", pre)
		ctx := context.Background()
		if b, err := baggage.Parse(ctxBaggage); err == nil || b.Len() > 0 {
			ctx = baggage.ContextWithBaggage(ctx, b)
		}
		if withSession {
			ctx = otelsession.Bind(ctx, otelsession.Session{ChatID: "C1", ThreadID: "T1"})
		}
		policy := propagation.AllowNone
		if allow {
			policy = propagation.AllowAll
		}
		_ = propagation.NewOutbound(policy).Inject(ctx, w3cProp, otelprop.HeaderCarrier(h), propagation.Dest{Transport: "fuzz", Name: "d"})
		for _, k := range sessionKeysIn(h) {
			if !allow {
				t.Fatalf("session member %q reached a refused destination: %v", k, h)
			}
			if _, ok := otelsession.SpecOf(k); !ok {
				t.Fatalf("stray %q reached an allowed destination: %v", k, h)
			}
		}
	})
}

// The policies' outcomes are OpenTelemetry metrics.
func TestPolicyMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	restore := setMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	defer restore()

	ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "C1", ChatName: strings.Repeat("n", 300)})
	out := propagation.NewOutbound(propagation.AllowNames("nats", "ok"))
	_ = out.Inject(ctx, w3cProp, otelprop.MapCarrier{}, propagation.Dest{Transport: "nats", Name: "ok"})
	_ = out.Inject(ctx, w3cProp, otelprop.MapCarrier{"baggage": "session.chat_id=x"}, propagation.Dest{Transport: "nats", Name: "no"})
	in := propagation.NewInbound(propagation.TrustAll)
	_, _ = in.Extract(context.Background(), w3cProp, otelprop.MapCarrier{"baggage": "session.chat_id=a,session.chat_id=b"}, propagation.Peer{Transport: "nats"})
	_, _ = in.Extract(context.Background(), w3cProp, otelprop.MapCarrier{"baggage": "session.chat_id=a,session.user_name=" + strings.Repeat("u", 300)}, propagation.Peer{Transport: "nats"})

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := sessiontest.CounterSums(rm)
	for _, want := range []string{
		"sessionwire.session.outbound sessionwire.outcome=sent sessionwire.signed=false sessionwire.transport=nats",
		"sessionwire.session.outbound sessionwire.outcome=withheld sessionwire.signed=false sessionwire.transport=nats",
		"sessionwire.session.outbound.prewritten_removed sessionwire.transport=nats",
		"sessionwire.session.inbound sessionwire.outcome=refused sessionwire.reason=duplicate sessionwire.transport=nats",
		"sessionwire.session.inbound sessionwire.outcome=accepted sessionwire.reason= sessionwire.transport=nats",
		"sessionwire.session.values sessionwire.direction=bind sessionwire.key=session.chat_name sessionwire.outcome=truncated",
		"sessionwire.session.values sessionwire.direction=inbound sessionwire.key=session.user_name sessionwire.outcome=truncated",
	} {
		assert.Positive(t, got[want], "no %q in %v", want, got)
	}
}

// A display value too long from a peer is cut, as Bind cuts it; the session
// and its routing are kept, and the cut is counted.
func TestInboundCutsDisplayValues(t *testing.T) {
	t.Parallel()
	in := propagation.NewInbound(propagation.TrustAll)
	long := strings.Repeat("名", 120) // 360 bytes
	b, err := baggage.New(mustMember(t, "session.thread_id", "17585"), mustMember(t, "session.chat_name", long),
		mustMember(t, "session.user_name", "eve\nadmin"))
	require.NoError(t, err)
	ctx, err := in.Extract(context.Background(), w3cProp, otelprop.MapCarrier{"baggage": b.String()}, propagation.Peer{Transport: "t"})
	require.NoError(t, err)
	v, _ := otelsession.Lookup(ctx, otelsession.FieldThreadID)
	assert.Equal(t, "17585", v)
	name, _ := otelsession.Lookup(ctx, otelsession.FieldChatName)
	want, _ := otelsession.ValidateValue(otelsession.FieldChatName.Spec(), long)
	assert.Equal(t, want, name)
	assert.Len(t, name, 255)
	_, st := otelsession.Lookup(ctx, otelsession.FieldUserName)
	assert.Equal(t, otelsession.Cleared, st, "an unusable display value is dropped")
	c := in.Counts()
	assert.Equal(t, uint64(1), c.Accepted)
	assert.Equal(t, uint64(2), c.Truncated)
}

func mustMember(t *testing.T, k, v string) baggage.Member {
	m, err := baggage.NewMemberRaw(k, v)
	require.NoError(t, err)
	return m
}

// setMeterProvider installs mp as the global MeterProvider. Instruments made
// from the global one before (sessionwire's are made once per process)
// forward to the first provider set, so only one test in this binary sets it.
func setMeterProvider(mp *sdkmetric.MeterProvider) (restore func()) {
	otel.SetMeterProvider(mp)
	return func() { _ = mp.Shutdown(context.Background()) }
}

// FuzzOutboundWritesTheBaggage: for a session bound from any values (some
// refused, some Cleared), perhaps changed by With, over the application's
// own baggage (any line OpenTelemetry parses: escapes, properties), and a
// span, the allowed outbound policy writes the members of the context's
// baggage, each as OpenTelemetry's W3C propagator encodes it, and the trace
// context it writes: whether it wrote the line from the writer's record
// (sessionstate.WireLine) or let the propagator write it.
func FuzzOutboundWritesTheBaggage(f *testing.F) {
	f.Add("telegram", "-100 «ops», 100%", "17585", "", true, "")
	f.Add("", "\x00", "a;b=c", "x", false, "app.tenant=t-42")
	f.Add("slack", "C1", "", "日本", true, "app.tenant=t-42,app.note=a%20b%2C%C2%AB;p1;p2=v%202, app.z = 1 ; q")
	f.Fuzz(func(t *testing.T, platform, chat, thread, with string, stateless bool, app string) {
		ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
		}))
		if app != "" {
			b, err := baggage.Parse(app)
			if err != nil {
				return
			}
			for _, m := range b.Members() {
				if otelsession.OwnedKey(m.Key()) {
					// The policy removes members of the session's namespace
					// it does not know: its line rightly differs.
					return
				}
			}
			ctx = baggage.ContextWithBaggage(ctx, b)
		}
		s := otelsession.Session{Platform: platform, ChatID: chat, ThreadID: thread, UserID: "u1", Stateless: stateless}
		ctx = otelsession.Bind(ctx, s)
		if with != "" {
			ctx = otelsession.With(ctx, otelsession.FieldUserName, with)
		}
		got := otelprop.MapCarrier{}
		if err := propagation.NewOutbound(propagation.AllowAll).Inject(ctx, w3cProp, got, propagation.Dest{Transport: "fuzz", Name: "d"}); err != nil {
			t.Fatal(err)
		}
		want := otelprop.MapCarrier{}
		w3cProp.Inject(ctx, want)
		split := func(line string) []string {
			ms := strings.Split(line, ",")
			slices.Sort(ms)
			return ms
		}
		if !slices.Equal(split(got["baggage"]), split(want["baggage"])) || got["traceparent"] != want["traceparent"] {
			t.Fatalf("the policy wrote %q, OpenTelemetry's propagator writes %q", got, want)
		}
	})
}

// A receiver whose propagator does not read baggage (TraceContext alone, a
// common setup) cannot see a session. It used to report every member of a
// well-formed session as malformed, counted against the sender; the error
// now names the propagator and how to fix it, and counts nothing.
func TestAPropagatorWithoutBaggageIsNamed(t *testing.T) {
	t.Parallel()
	policy := propagation.NewInbound(propagation.TrustAll)
	carrier := otelprop.MapCarrier{"baggage": "session.platform=telegram,session.chat_id=42"}
	ctx, err := policy.Extract(context.Background(), otelprop.TraceContext{}, carrier, propagation.Peer{Transport: "http"})
	require.ErrorIs(t, err, propagation.ErrNoBaggagePropagator)
	assert.NotErrorIs(t, err, propagation.ErrMalformedMember)
	assert.Contains(t, err.Error(), "propagation.Baggage{}")
	assert.Contains(t, err.Error(), "traceparent", "names the propagator's fields")
	_, st := otelsession.Lookup(ctx, otelsession.FieldChatID)
	assert.Equal(t, otelsession.Unset, st)
	assert.Equal(t, propagation.Counts{}, policy.Counts(), "nothing counted against the input")

	// A member the W3C parser drops is still the sender's.
	both := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	_, err = policy.Extract(context.Background(), both, otelprop.MapCarrier{"baggage": "session.chat_id=4 2"}, propagation.Peer{Transport: "http"})
	require.ErrorIs(t, err, propagation.ErrMalformedMember)
	assert.NotErrorIs(t, err, propagation.ErrNoBaggagePropagator)
}

// Mistakes a new user makes get an answer, not a panic: a nil policy trusts
// no peer, a nil carrier is an error.
func TestInboundNilArguments(t *testing.T) {
	t.Parallel()
	var nilPolicy *propagation.Inbound
	carrier := otelprop.MapCarrier{"baggage": "session.chat_id=42"}
	ctx, err := nilPolicy.Extract(context.Background(), w3cProp, carrier, propagation.Peer{Transport: "http"})
	require.NoError(t, err)
	_, st := otelsession.Lookup(ctx, otelsession.FieldChatID)
	assert.Equal(t, otelsession.Unset, st, "a nil policy trusts no peer")
	assert.Equal(t, propagation.Counts{}, nilPolicy.Counts())
	assert.False(t, nilPolicy.Trusts(context.Background(), propagation.Peer{Transport: "env"}))

	_, err = propagation.NewInbound(propagation.TrustAll).Extract(context.Background(), w3cProp, nil, propagation.Peer{Transport: "http"})
	require.ErrorContains(t, err, "extract session from http: nil carrier")
}

// A hostile header can name 60 unknown session keys: the error names eight
// and counts the rest, instead of growing with the input.
func TestInboundErrorNamesAFewMembers(t *testing.T) {
	t.Parallel()
	var members []string
	for i := range 60 {
		members = append(members, fmt.Sprintf("session.future%d=x", i))
	}
	carrier := otelprop.MapCarrier{"baggage": strings.Join(members, ",")}
	_, err := propagation.NewInbound(propagation.TrustAll).Extract(context.Background(), w3cProp, carrier, propagation.Peer{Transport: "http"})
	require.ErrorIs(t, err, propagation.ErrUnknownSessionKey)
	assert.Contains(t, err.Error(), `"session.future7"`)
	assert.NotContains(t, err.Error(), `"session.future8"`)
	assert.Contains(t, err.Error(), "and 52 more like them (unknown key in the session namespace)")
	assert.Less(t, len(err.Error()), 1000)
}
