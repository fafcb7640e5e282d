package natssession_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go"
	otelprop "go.opentelemetry.io/otel/propagation"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

// The baseline beside each benchmark is the raw OTel propagator on a
// MapCarrier, with the same full session; the tracer is a no-op so that only
// the carrying is measured.

func benchSession() context.Context {
	return conversationFor(1).bind(context.Background())
}

func BenchmarkInject(b *testing.B) {
	ctx := benchSession()
	b.Run("raw propagator to MapCarrier", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w3c.Inject(ctx, otelprop.MapCarrier{})
		}
	})
	b.Run("Publisher.Inject to nats.Msg", func(b *testing.B) {
		pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tracenoop.NewTracerProvider()), natssession.WithOutbound(toQueue))
		b.ReportAllocs()
		for b.Loop() {
			_, span := pub.Inject(ctx, &nats.Msg{Subject: "chat.in"})
			span.End()
		}
	})
}

func BenchmarkExtract(b *testing.B) {
	m := otelprop.MapCarrier{}
	w3c.Inject(benchSession(), m)
	h := nats.Header{}
	for k, v := range m {
		h[k] = []string{v}
	}
	msg := &nats.Msg{Subject: "chat.in", Header: h}
	policy := propagation.NewInbound(propagation.TrustAll)
	base := context.Background()
	check := func(b *testing.B, ctx context.Context) {
		if v, _ := otelsession.Lookup(ctx, otelsession.FieldChatID); v != conversationFor(1).s.ChatID {
			b.Fatalf("chat id %q after extract", v)
		}
	}
	b.Run("raw propagator from MapCarrier", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			check(b, w3c.Extract(base, m))
		}
	})
	// otel's HTTP carrier is, like nats.Header, a ValuesGetter: the baggage
	// propagator then takes its multi-header path, which costs more than the
	// single-header one a MapCarrier gets.
	hh := http.Header{}
	w3c.Inject(benchSession(), otelprop.HeaderCarrier(hh))
	b.Run("raw propagator from HeaderCarrier", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			check(b, w3c.Extract(base, otelprop.HeaderCarrier(hh)))
		}
	})
	b.Run("Inbound.Extract from MapCarrier", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, _ := policy.Extract(base, w3c, m, propagation.Peer{Transport: "nats", Name: "chat.in"})
			check(b, ctx)
		}
	})
	b.Run("Consumer.Extract from nats.Msg", func(b *testing.B) {
		sub := natssession.NewConsumer(policy, natssession.WithPropagator(w3c), natssession.WithTracerProvider(tracenoop.NewTracerProvider()))
		b.ReportAllocs()
		for b.Loop() {
			ctx, span, _ := sub.Extract(base, msg)
			span.End()
			check(b, ctx)
		}
	})
}
