package propagation_test

import (
	"context"
	"testing"
	"time"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

// BenchmarkOutboundInject measures the outbound policy's one step on its
// own, beside the stock propagators writing the same context into the same
// kind of carrier. path=raw is the baseline of every row; path=session is
// Outbound.Inject, the step every transport calls:
//
//   - allowed: the destination may receive the session (16 members);
//   - withheld: it may not, so the session is removed and only trace
//     context (and foreign baggage, here none) is written;
//   - signed: allowed, and signed for a message id. Its baselines are
//     path=raw, the same session unsigned (what signing adds shows beside
//     it), and path=raw_signed, what a program without sessionwire runs to
//     send the same signed bytes: the same canonical input MACed with
//     crypto/hmac, the member added with Baggage.SetMember, then the stock
//     injection (sessiontest.RawSigner);
//   - forwarded: allowed, from a worker's context: the session an inbound
//     policy accepted from a message, sent on as it came;
//   - no session: a context without one, as most background work is.
func BenchmarkOutboundInject(b *testing.B) {
	key := propagation.Key{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}
	clock := func() time.Time { return signTime }
	signer, err := propagation.NewSigner(key, propagation.WithClock(clock))
	if err != nil {
		b.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	bound := trace.ContextWithSpanContext(otelsession.Bind(context.Background(), fullTestSession), sc)
	bare := trace.ContextWithSpanContext(context.Background(), sc)
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	dest := propagation.Dest{Transport: propagation.TransportNATS, Name: "chat.in", MessageID: "m-1"}
	allow := propagation.NewOutbound(propagation.AllowAll)
	deny := propagation.NewOutbound(propagation.AllowNone)
	sign := propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer))

	raw := func(ctx context.Context) func(*testing.B) {
		return func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				prop.Inject(ctx, otelprop.MapCarrier{})
			}
		}
	}
	session := func(ctx context.Context, o *propagation.Outbound) func(*testing.B) {
		return func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				if err := o.Inject(ctx, prop, otelprop.MapCarrier{}, dest); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("allowed/path=raw", raw(bound))
	b.Run("allowed/path=session", session(bound, allow))
	b.Run("withheld/path=raw", raw(bound))
	b.Run("withheld/path=session", session(bound, deny))
	b.Run("signed/path=raw", raw(bound))
	b.Run("signed/path=raw_signed", func(b *testing.B) {
		rs := sessiontest.NewRawSigner(key.ID, key.Secret, clock)
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			ctx, err := rs.Sign(bound, dest.MessageID)
			if err != nil {
				b.Fatal(err)
			}
			prop.Inject(ctx, otelprop.MapCarrier{})
		}
	})
	b.Run("signed/path=session", session(bound, sign))
	// A worker's context: the session an inbound policy accepted from a
	// message, under the worker's span, sent on (a notification, a tool
	// call) as it came.
	line := otelprop.MapCarrier{}
	prop.Inject(bound, line)
	accepted, err := propagation.NewInbound(propagation.TrustAll).Extract(context.Background(), prop, line,
		propagation.Peer{Transport: propagation.TransportNATS})
	if err != nil {
		b.Fatal(err)
	}
	forwarded := trace.ContextWithSpanContext(accepted, sc)
	b.Run("forwarded/path=raw", raw(forwarded))
	b.Run("forwarded/path=session", session(forwarded, allow))
	b.Run("no_session/path=raw", raw(bare))
	b.Run("no_session/path=session", session(bare, allow))
}
