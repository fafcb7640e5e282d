package execsession_test

// Environ beside the raw OpenTelemetry path it wraps. Run:
//
//	go test -run '^$' -bench Environ -benchmem -count 8 -benchtime 0.3s ./propagation/execsession/
//
// Both start from the same context (a full session bound with Bind, and a
// span) and the same os.Environ(); the baseline (path=raw) only injects the
// carriers with envcar and appends them, with no leak policy and no legacy
// variables. Environ_signed signs the session it sends (the parent's
// outbound policy with a signer); its baselines are the same raw path, and
// path=raw_signed, the same signed bytes without sessionwire (the signature
// computed with crypto/hmac over the Signer's input, added with
// Baggage.SetMember; sessiontest.RawSigner).

import (
	"context"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/propagators/envcar"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/execsession"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

var (
	sinkEnv []string
	sinkN   int
)

func BenchmarkEnviron(b *testing.B) {
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	ctx := trace.ContextWithSpanContext(otelsession.Bind(context.Background(), fullSession("/srv/work/alice")), testTrace)
	b.Logf("os.Environ() holds %d variables", len(os.Environ()))

	// raw injects the carriers with envcar and appends them; sign, when not
	// nil, signs the session first, as a program without sessionwire would
	// (the raw_signed baseline).
	raw := func(sign func(context.Context, string) (context.Context, error)) func(*testing.B) {
		return func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				ctx := ctx
				if sign != nil {
					var err error
					if ctx, err = sign(ctx, ""); err != nil {
						b.Fatal(err)
					}
				}
				env := os.Environ()
				m := make(map[string]string, 3)
				prop.Inject(ctx, &envcar.Carrier{SetEnvFunc: func(k, v string) { m[k] = v }})
				for k, v := range m {
					env = append(env, k+"="+v)
				}
				sinkEnv = env
			}
		}
	}
	session := func(cfg execsession.Config) func(*testing.B) {
		return func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				sinkEnv = cfg.Environ(ctx, os.Environ())
			}
		}
	}
	key := propagation.Key{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}
	signer, err := propagation.NewSigner(key)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Environ/path=raw", raw(nil))
	b.Run("Environ/path=session", session(execsession.Config{Propagator: prop}))
	b.Run("Environ_signed/path=raw", raw(nil))
	b.Run("Environ_signed/path=raw_signed", raw(sessiontest.NewRawSigner(key.ID, key.Secret, time.Now).Sign))
	b.Run("Environ_signed/path=session", session(execsession.Config{Propagator: prop,
		Outbound: propagation.NewOutbound(nil, propagation.WithSigner(signer))}))
	// Where Environ's extra time goes: the policy alone (a propagator that
	// injects nothing), and reading every field, which the policy must do.
	b.Run("parts/Environ_without_carriers", func(b *testing.B) {
		cfg := execsession.Config{Propagator: otelprop.NewCompositeTextMapPropagator()}
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkEnv = cfg.Environ(ctx, os.Environ())
		}
	})
	b.Run("parts/otelsession.Range", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			otelsession.Range(ctx, func(otelsession.Field, string, otelsession.State) bool { n++; return true })
			sinkN = n
		}
	})
	b.Run("parts/propagator.Fields", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkN = len(prop.Fields())
		}
	})
	b.Run("parts/os.Environ", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkEnv = os.Environ()
		}
	})
}
