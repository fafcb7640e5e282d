package propagation_test

import (
	"context"
	"net/netip"
	"testing"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

var sinkCtx context.Context

// The policies allocate nothing beyond what the stock propagators do with
// the same carrier: every check they add reads what is already there. An
// allocation budget, asserted without timing anything, so that a change
// making a policy allocate on the common path fails here rather than only
// in a benchmark nobody reruns (BenchmarkOutboundInject and
// httpsession.BenchmarkInbound time the same steps).
func TestPoliciesAllocateNoMoreThanTheStockPropagators(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	bound := trace.ContextWithSpanContext(otelsession.Bind(context.Background(), fullTestSession), sc)
	bare := trace.ContextWithSpanContext(context.Background(), sc)
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	dest := propagation.Dest{Transport: propagation.TransportNATS, Name: "chat.in"}
	allow := propagation.NewOutbound(propagation.AllowAll)

	wire := otelprop.MapCarrier{}
	prop.Inject(bound, wire)
	in := propagation.NewInbound(propagation.TrustAll)
	peer := propagation.Peer{Transport: propagation.TransportHTTP, Addr: netip.MustParseAddr("127.0.0.1")}
	bg := context.Background()

	for _, c := range []struct {
		name            string
		raw, withPolicy func()
	}{
		{
			"Outbound.Inject, a full session allowed",
			func() { prop.Inject(bound, otelprop.MapCarrier{}) },
			func() { _ = allow.Inject(bound, prop, otelprop.MapCarrier{}, dest) },
		},
		{
			"Outbound.Inject, no session",
			func() { prop.Inject(bare, otelprop.MapCarrier{}) },
			func() { _ = allow.Inject(bare, prop, otelprop.MapCarrier{}, dest) },
		},
		{
			"Inbound.Extract, a full session accepted",
			func() { sinkCtx = prop.Extract(bg, wire) },
			func() { sinkCtx, _ = in.Extract(bg, prop, wire, peer) },
		},
	} {
		raw := testing.AllocsPerRun(100, c.raw)
		got := testing.AllocsPerRun(100, c.withPolicy)
		if got > raw {
			t.Errorf("%s: %.0f allocations, the stock propagator alone %.0f", c.name, got, raw)
		}
	}
	if v, st := otelsession.Lookup(sinkCtx, otelsession.FieldChatID); st != otelsession.Set || v != fullTestSession.ChatID {
		t.Fatalf("the policy did not accept the session: chat id %q (%v)", v, st)
	}
}
