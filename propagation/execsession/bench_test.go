package execsession_test

// Environ beside the raw OpenTelemetry path it wraps. Run:
//
//	go test -run '^$' -bench Environ -benchmem -count 8 -benchtime 0.3s ./propagation/execsession/
//
// Both start from the same context (a full session bound with Bind, and a
// span) and the same os.Environ(); the baseline (path=raw) only injects the
// carriers with envcar and appends them, with no leak policy and no legacy
// variables; path=raw_with_vars is what a program without sessionwire
// must run to give the child the same environment: the raw path plus the
// legacy HERMES_* variables, written from values it holds. Environ_signed
// signs the session it sends (the parent's outbound policy with a signer);
// its baselines are the same raw path, and path=raw_signed, the same signed bytes without sessionwire (the signature
// computed with crypto/hmac over the Signer's input, added with
// Baggage.SetMember; sessiontest.RawSigner).

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
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
	// What a program without sessionwire runs to give the child the same
	// environment: the raw path, plus the legacy variables a child of the
	// original module reads (every bound field and the working directory),
	// written from values the program already holds (read once, here, as
	// from a struct of its own), and the inherited ones replaced.
	var vars [][2]string
	otelsession.Range(ctx, func(f otelsession.Field, v string, st otelsession.State) bool {
		if st != otelsession.Unset {
			vars = append(vars, [2]string{f.Name(), v})
		}
		return true
	})
	vars = append(vars, [2]string{execsession.CwdVar, otelsession.Cwd(ctx)})
	rawWithVars := func() []string {
		inherited := os.Environ()
		env := make([]string, 0, len(inherited)+len(vars)+3)
		for _, kv := range inherited {
			if !strings.HasPrefix(kv, "HERMES_") && !strings.HasPrefix(kv, execsession.CwdVar+"=") {
				env = append(env, kv)
			}
		}
		for _, kv := range vars {
			env = append(env, kv[0]+"="+kv[1])
		}
		m := make(map[string]string, 3)
		prop.Inject(ctx, &envcar.Carrier{SetEnvFunc: func(k, v string) { m[k] = v }})
		for k, v := range m {
			env = append(env, k+"="+v)
		}
		return env
	}
	// The baseline must give the child what Environ gives it (the members
	// of BAGGAGE in any order: OpenTelemetry writes them in map order).
	normalized := func(env []string) []string {
		env = slices.Clone(env)
		for i, kv := range env {
			if v, ok := strings.CutPrefix(kv, "BAGGAGE="); ok {
				env[i] = "BAGGAGE=" + strings.Join(slices.Sorted(strings.SplitSeq(v, ",")), ",")
			}
		}
		return slices.Sorted(slices.Values(env))
	}
	if got, want := normalized(rawWithVars()), normalized(execsession.Config{Propagator: prop}.Environ(ctx, os.Environ())); !slices.Equal(got, want) {
		b.Fatalf("path=raw_with_vars writes\n%q\nEnviron writes\n%q", got, want)
	}
	b.Run("Environ/path=raw_with_vars", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkEnv = rawWithVars()
		}
	})
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
	// For scale: starting a child with that environment and waiting for it
	// (true(1), which does nothing) is what Environ prepares for.
	b.Run("parts/start_and_wait_for_true", func(b *testing.B) {
		path, err := exec.LookPath("true")
		if err != nil {
			b.Skip("no true(1) on this machine:", err)
		}
		env := execsession.Config{Propagator: prop}.Environ(ctx, os.Environ())
		defer benchcpu.Time(b)()
		for b.Loop() {
			cmd := exec.Command(path)
			cmd.Env = env
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
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
