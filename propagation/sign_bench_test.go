package propagation_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

var benchSink context.Context

// BenchmarkSignature measures signing and verifying a full session (16
// members on the wire, about 500 bytes; 17 with the signature) beside the
// unsigned inbound path and the stock OTel extraction of the same header:
//
//   - otel/Extract: the raw propagator on the unsigned header (the baseline);
//   - Extract/unsigned: the policy, trusted peer, no signature;
//   - Extract/signed,unverified: the policy, trusted peer, signature carried
//     but not checked (what the extra member costs the parser);
//   - Extract/signed,verified: the policy, untrusted peer, signature verified.
//
// What verification adds per message is signed,verified minus
// signed,unverified; Verify is the same check on its own. Sign is beside
// Bind, which a gateway calls just before it.
func BenchmarkSignature(b *testing.B) {
	key := propagation.Key{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}
	clock := func() time.Time { return signTime }
	signer, err := propagation.NewSigner(key, propagation.WithClock(clock))
	if err != nil {
		b.Fatal(err)
	}
	verifier, err := propagation.NewVerifier([]propagation.Key{key}, propagation.WithClock(clock))
	if err != nil {
		b.Fatal(err)
	}
	bound := otelsession.Bind(context.Background(), fullTestSession)
	signed, err := signer.Sign(bound)
	if err != nil {
		b.Fatal(err)
	}
	header := func(ctx context.Context) http.Header {
		h := http.Header{}
		otelprop.Baggage{}.Inject(ctx, otelprop.HeaderCarrier(h))
		return h
	}
	plainH, signedH := header(bound), header(signed)
	prop := otelprop.Baggage{}
	peer := propagation.Peer{Transport: "http"}
	bg := context.Background()
	extract := func(b *testing.B, policy *propagation.Inbound, h http.Header) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			ctx, err := policy.Extract(bg, prop, otelprop.HeaderCarrier(h), peer)
			if err != nil {
				b.Fatal(err)
			}
			benchSink = ctx
		}
		if c := policy.Counts(); c.Accepted == 0 {
			b.Fatalf("counts %+v: nothing accepted", c)
		}
	}

	b.Run("otel/Extract", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			benchSink = prop.Extract(bg, otelprop.HeaderCarrier(plainH))
		}
	})
	b.Run("Extract/unsigned", func(b *testing.B) {
		extract(b, propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(0)), plainH)
	})
	b.Run("Extract/signed,unverified", func(b *testing.B) {
		extract(b, propagation.NewInbound(propagation.TrustAll), signedH)
	})
	b.Run("Extract/signed,verified", func(b *testing.B) {
		policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
		extract(b, policy, signedH)
		if c := policy.Counts(); c.Signed != c.Accepted {
			b.Fatalf("counts %+v: the signed path did not run", c)
		}
	})
	b.Run("Verify", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			if err := verifier.Verify(signed, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Bind", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			benchSink = otelsession.Bind(bg, fullTestSession)
		}
	})
	b.Run("Sign", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			ctx, err := signer.Sign(bound)
			if err != nil {
				b.Fatal(err)
			}
			benchSink = ctx
		}
	})
}
