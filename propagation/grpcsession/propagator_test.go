package grpcsession_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
)

// ExceptBaggage writes and reads the trace context as the propagator it
// wraps does, and no baggage in either direction, whatever the key's
// spelling; with nil it wraps the global propagator (w3c, set by TestMain).
func TestExceptBaggage(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(otelsession.Bind(context.Background(), benchSession), sc)
	for _, p := range []otelprop.TextMapPropagator{grpcsession.ExceptBaggage(nil), grpcsession.ExceptBaggage(w3c)} {
		md := metadata.MD{}
		p.Inject(ctx, grpcsession.MetadataCarrier(md))
		if len(md["traceparent"]) != 1 {
			t.Fatalf("no trace context written: %v", md)
		}
		if len(md["baggage"]) != 0 {
			t.Fatalf("baggage written: %v", md["baggage"])
		}
		// The same context through the full propagator writes both: the
		// wrapped one is the one given.
		full := metadata.MD{}
		w3c.Inject(ctx, grpcsession.MetadataCarrier(full))
		if len(full["baggage"]) != 1 {
			t.Fatalf("the full propagator wrote no baggage: %v", full)
		}

		// Reading: every spelling of the baggage key is hidden, the trace
		// context is read, and a baggage the context already had stays.
		in := metadata.MD{"traceparent": full["traceparent"], "baggage": full["baggage"], "Baggage": full["baggage"]}
		had, _ := baggage.Parse("k=v")
		got := p.Extract(baggage.ContextWithBaggage(context.Background(), had), grpcsession.MetadataCarrier(in))
		if rsc := trace.SpanContextFromContext(got); !rsc.IsRemote() || rsc.TraceID() != sc.TraceID() || rsc.SpanID() != sc.SpanID() {
			t.Fatalf("trace context not extracted: %+v", rsc)
		}
		if b := baggage.FromContext(got); b.Len() != 1 || b.Member("k").Value() != "v" {
			t.Fatalf("baggage after Extract: %q, want the context's own k=v", b.String())
		}
		// A carrier without Values (the W3C propagators then use Get).
		got = p.Extract(context.Background(), otelprop.MapCarrier{"traceparent": full["traceparent"][0], "baggage": full["baggage"][0]})
		if b := baggage.FromContext(got); b.Len() != 0 || !trace.SpanContextFromContext(got).IsValid() {
			t.Fatalf("from a MapCarrier: baggage %q, span context %+v", b.String(), trace.SpanContextFromContext(got))
		}
		if f := p.Fields(); slices.Contains(f, "baggage") || !slices.Contains(f, "traceparent") {
			t.Fatalf("fields %v", f)
		}
	}
}
