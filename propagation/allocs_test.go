package propagation_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

var sinkCtx context.Context

// The policies allocate nothing beyond what the stock propagators do with
// the same carrier (every check they add reads what is already there), and
// an accepted session from a simple line less than the stock extraction,
// the record it leaves for its readers included. An allocation
// budget, asserted without timing anything, so that a change
// making a policy allocate on the common path fails here rather than only
// in a benchmark nobody reruns (BenchmarkOutboundInject and
// httpsession.BenchmarkInbound time the same steps).
func TestPoliciesAllocateNoMoreThanTheStockPropagators(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	bound := trace.ContextWithSpanContext(otelsession.Bind(context.Background(), fullTestSession), sc)
	bare := trace.ContextWithSpanContext(context.Background(), sc)
	// A session bound over the application's own baggage, as a gateway's
	// handler binds it over a request that carried some.
	appBag, err := baggage.Parse("app.tenant=t-42,app.plan=pro")
	if err != nil {
		t.Fatal(err)
	}
	boundApp := trace.ContextWithSpanContext(otelsession.Bind(baggage.ContextWithBaggage(context.Background(), appBag), fullTestSession), sc)
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	dest := propagation.Dest{Transport: propagation.TransportNATS, Name: "chat.in"}
	allow := propagation.NewOutbound(propagation.AllowAll)
	key := testKey("k1")
	sign := propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(mustSigner(t, key, signTime)))
	rawSigner := sessiontest.NewRawSigner(key.ID, key.Secret, fixedClock(signTime))

	wire := otelprop.MapCarrier{}
	prop.Inject(bound, wire)
	in := propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(0))
	cached := propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(4))
	// Lines of distinct sessions, more than cached keeps (each one first
	// seen: noted, no entry made), and the messages of one conversation
	// (each served from the entry the ones before made).
	sessions, messages := make([]otelprop.MapCarrier, 64), make([]otelprop.MapCarrier, 64)
	for i := range sessions {
		s := fullTestSession
		s.ChatID = fmt.Sprintf("chat-%d", i)
		sessions[i] = otelprop.MapCarrier{}
		prop.Inject(trace.ContextWithSpanContext(otelsession.Bind(context.Background(), s), sc), sessions[i])
		s = fullTestSession
		s.MessageID = fmt.Sprint(90000 + i)
		messages[i] = otelprop.MapCarrier{}
		prop.Inject(trace.ContextWithSpanContext(otelsession.Bind(context.Background(), s), sc), messages[i])
	}
	var turn int
	inTurn := func(cs []otelprop.MapCarrier) otelprop.MapCarrier {
		turn++
		return cs[turn%len(cs)]
	}
	peer := propagation.Peer{Transport: propagation.TransportHTTP, Addr: netip.MustParseAddr("127.0.0.1")}
	bg := context.Background()

	for _, c := range []struct {
		name            string
		raw, withPolicy func()
		extra           float64 // allocations allowed beyond raw's
	}{
		{
			// A baggage Bind built is written from its record, in one
			// string, where the propagator makes one per member and joins
			// them (sessionstate.WireLine): at least ten fewer. Fails
			// should the propagator write it.
			"Outbound.Inject, a full session allowed",
			func() { prop.Inject(bound, otelprop.MapCarrier{}) },
			func() { _ = allow.Inject(bound, prop, otelprop.MapCarrier{}, dest) },
			-10,
		},
		{
			// The same, the application's members written beside the
			// session's, looked up by the keys the writer noted.
			"Outbound.Inject, a full session beside the application's members, allowed",
			func() { prop.Inject(boundApp, otelprop.MapCarrier{}) },
			func() { _ = allow.Inject(boundApp, prop, otelprop.MapCarrier{}, dest) },
			-10,
		},
		{
			// The signature is written into the propagator's baggage line:
			// one string more than the unsigned injection.
			"Outbound.Inject, a full session allowed and signed, beside the unsigned injection",
			func() { prop.Inject(bound, otelprop.MapCarrier{}) },
			func() { _ = sign.Inject(bound, prop, otelprop.MapCarrier{}, dest) },
			1 + poolSlack,
		},
		{
			"Outbound.Inject, a full session allowed and signed, beside signing it without sessionwire",
			func() {
				ctx, _ := rawSigner.Sign(bound, "")
				prop.Inject(ctx, otelprop.MapCarrier{})
			},
			func() { _ = sign.Inject(bound, prop, otelprop.MapCarrier{}, dest) },
			0,
		},
		{
			"Outbound.Inject, no session",
			func() { prop.Inject(bare, otelprop.MapCarrier{}) },
			func() { _ = allow.Inject(bare, prop, otelprop.MapCarrier{}, dest) },
			0,
		},
		{
			"Inbound.Extract, a full session accepted, without the cache",
			func() { sinkCtx = prop.Extract(bg, wire) },
			func() { sinkCtx, _ = in.Extract(bg, prop, wire, peer) },
			// The record of the accepted session's values (which every
			// read of it then takes instead of a look-up, Lookup about a
			// quarter of the raw member read) is one allocation more; the
			// line, a simple one, is built by OpenTelemetry's constructors
			// instead of parsed, which takes several fewer (simpleline.go).
			// Fewer in all: should the line be parsed, this fails.
			-1,
		},
		{
			"Inbound.Extract, a full session first seen (noted by the cache)",
			func() { sinkCtx = prop.Extract(bg, inTurn(sessions)) },
			func() { sinkCtx, _ = cached.Extract(bg, prop, inTurn(sessions), peer) },
			// The record, and the simple line built, as above.
			-1,
		},
		{
			// OpenTelemetry's SetMember of the new message id into the
			// entry's baggage, the trace context, the record: fewer than
			// the parse.
			"Inbound.Extract, the next message of a conversation (served from the cache)",
			func() { sinkCtx = prop.Extract(bg, inTurn(messages)) },
			func() { sinkCtx, _ = cached.Extract(bg, prop, inTurn(messages), peer) },
			0,
		},
	} {
		raw := testing.AllocsPerRun(100, c.raw)
		got := testing.AllocsPerRun(100, c.withPolicy)
		t.Logf("%s: %.0f allocations, the stock propagator %.0f", c.name, got, raw)
		if got > raw+c.extra {
			t.Errorf("%s: %.0f allocations, the stock propagator alone %.0f (%+.0f allowed)", c.name, got, raw, c.extra)
		}
	}
	if v, st := otelsession.Lookup(sinkCtx, otelsession.FieldChatID); st != otelsession.Set || v != fullTestSession.ChatID {
		t.Fatalf("the policy did not accept the session: chat id %q (%v)", v, st)
	}
	if sessionstate.RecordOf(sinkCtx, baggage.FromContext(sinkCtx)) == nil {
		t.Fatal("the accepted session left no record for its readers")
	}
}

// The record an accepted session leaves for the reads is its only
// allocation over the stock propagator's extraction, and it is small: from
// one baggage line, the values the check read from the line are spans of
// it, and the context, the record and the spans take one 256-byte object.
// Its values once took 400 bytes of string headers of their own, a 512-byte
// object. Each line here holds values that need decoding too (a chat and a
// user name with a space and a non-ASCII letter), which the spans hold
// apart, and a session of any value left unset or cleared.
func TestInboundRecordBytes(t *testing.T) {
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	// Without the cache, which would serve every extraction but the first
	// from its entry (TestPoliciesAllocateNoMoreThanTheStockPropagators
	// counts what an entry adds).
	in := propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(0))
	peer := propagation.Peer{Transport: propagation.TransportHTTP, Addr: netip.MustParseAddr("127.0.0.1")}
	bg := context.Background()
	sparse := otelsession.Session{Platform: "slack", ChatID: "C042", ThreadID: "17.2", UserName: "Zoë B"}
	for name, ctx := range map[string]context.Context{
		"full session":   otelsession.Bind(bg, fullTestSession),
		"sparse session": otelsession.Bind(bg, sparse),
		"cleared thread": otelsession.With(otelsession.Bind(bg, sparse), otelsession.FieldThreadID, ""),
	} {
		wire := otelprop.MapCarrier{}
		prop.Inject(ctx, wire)
		// What the stock extraction's baggage holds, read without a record.
		extracted := prop.Extract(bg, wire)
		want := otelsession.FromContext(extracted)
		_, rawBytes := allocated(func() { sinkCtx = prop.Extract(bg, wire) })
		_, gotBytes := allocated(func() { sinkCtx, _ = in.Extract(bg, prop, wire, peer) })
		t.Logf("%s: %.0f B beside the stock propagator's %.0f", name, gotBytes, rawBytes)
		if gotBytes > rawBytes+256+16 { // 16: what else the process allocates meanwhile
			t.Errorf("%s: the accepted session takes %.0f B beside the stock propagator's %.0f: more than its 256-byte record over it",
				name, gotBytes, rawBytes)
		}
		if got := otelsession.FromContext(sinkCtx); got != want {
			t.Errorf("%s: the record reads %+v; want %+v", name, got, want)
		}
		for _, f := range otelsession.Fields() {
			gv, gs := otelsession.Lookup(sinkCtx, f)
			wv, ws := otelsession.Lookup(extracted, f)
			if gv != wv || gs != ws {
				t.Errorf("%s: %s reads %q (%v) from the record; want %q (%v)", name, f.Key(), gv, gs, wv, ws)
			}
		}
	}
}

// allocated returns the allocations and the bytes fn allocates per call,
// each over 500 calls.
func allocated(fn func()) (allocs, bytes float64) {
	return testing.AllocsPerRun(500, fn), benchcpu.BytesPerRun(500, fn)
}
