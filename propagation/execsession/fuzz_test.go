package execsession

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// sliceEnv is an environment given as "KEY=value" entries, read as a Go
// process reads its own: the first entry of a name wins, entries without
// "=" are ignored.
type sliceEnv map[string]string

func newSliceEnv(entries []string) sliceEnv {
	env := sliceEnv{}
	for _, kv := range entries {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if _, dup := env[name]; !dup {
			env[name] = value
		}
	}
	return env
}

func (e sliceEnv) lookup(name string) (string, bool) { v, ok := e[name]; return v, ok }

// Get, Set and Keys make sliceEnv the OTel environment carrier envcar would
// be over the same environment: names are normalised the same way.
func (e sliceEnv) Get(key string) string { return e[envName(key)] }
func (e sliceEnv) Set(string, string)    {}
func (e sliceEnv) Keys() []string        { return slices.Collect(maps.Keys(e)) }

var fuzzProp = otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})

// The fuzzing key and clock: the seeds hold a session signed with them.
var (
	fuzzKey  = propagation.Key{ID: "fz", Secret: []byte("execsession fuzzing secret, 32 bytes+")}
	fuzzTime = time.Unix(1_767_225_600, 0)
)

// fuzzSession is the session the signed seeds carry.
var fuzzSession = otelsession.Session{
	Platform: "telegram", ChatID: "-100123", ThreadID: "17585", UserID: "u-42", ScopeID: "guild-7",
	ChatName: "", UISessionID: "tab-3", Cwd: "/srv/work", Cron: otelsession.CronOn,
}

// signedChildEnv is the environment a parent builds for a child from a
// signed fuzzSession.
func signedChildEnv(tb testing.TB) []string {
	s, err := propagation.NewSigner(fuzzKey, propagation.WithClock(func() time.Time { return fuzzTime }))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, err := s.Sign(otelsession.Bind(context.Background(), fuzzSession))
	if err != nil {
		tb.Fatal(err)
	}
	return Config{Propagator: fuzzProp}.Environ(ctx, []string{"PATH=/usr/bin"})
}

// reasons are the errors fromEnvironment may wrap.
var reasons = []error{ErrInvalidVariable, propagation.ErrBaggageTooLarge, propagation.ErrMalformedMember,
	propagation.ErrDuplicateMember, propagation.ErrInvalidValue, propagation.ErrLocalField, propagation.ErrUnknownSessionKey,
	propagation.ErrBadSignature, propagation.ErrSignatureExpired, propagation.ErrUnknownKey}

// FuzzFromEnvironment feeds a child's environment (the input split at "\n",
// one "KEY=value" entry each) to the child-side extraction, with the zero
// Config's trust in the parent, or, when verify is set, with a policy that
// trusts no parent and verifies signatures made with fuzzKey at fuzzTime.
// Whatever the input:
//   - it does not panic;
//   - with an error, the error wraps one of the known reasons, every field is
//     Unset, no session member or signature is left in the baggage, and the
//     working directory is empty;
//   - without one, remote fields are exactly what the stock propagator
//     extracts from BAGGAGE (or, with verify, all Unset, or exactly the
//     signed fuzzSession: nothing else can carry a valid signature), local
//     fields and the working directory are the variables' values, the
//     delegated-child mark is DelegatedChildVar non-empty, and every Set value is
//     one Bind could produce;
//   - the same input gives the same outcome twice.
//
// Seeds: testdata/fuzz/FuzzFromEnvironment and the f.Add calls below. Run it
// with
//
//	go test ./propagation/execsession -run '^$' -fuzz '^FuzzFromEnvironment$' -fuzztime 20s -parallel 1
func FuzzFromEnvironment(f *testing.F) {
	child := strings.Join(signedChildEnv(f), "\n")
	for _, seed := range []string{
		"",
		child,
		child + "\nBAGGAGE=session.chat_id=first",
		"BAGGAGE=session.chat_id=second\n" + child,
		strings.Replace(child, "session.thread_id=17585", "session.thread_id=17586", 1),
		"BAGGAGE=session.chat_id=c,session.chat_id=d",
		"BAGGAGE=session.ui_session_id=tab",
		"BAGGAGE=session.thread_id=%0D%0A",
		"BAGGAGE=session.chat_id=%FF",
		"BAGGAGE=session.sig=v1.fz.1767225600.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"baggage=session.chat_id=lowercase-name",
		"HERMES_UI_SESSION_ID=\nSESSIONWIRE_CWD=/x\nHERMES_DELEGATED_CHILD_CONTEXT=1",
		"HERMES_DELEGATED_CHILD_CONTEXT=/home/worker/.hermes/kanban",
		"HERMES_UI_SESSION_ID=" + strings.Repeat("t", 600),
		"TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nBAGGAGE=app.x=1",
		"BAGGAGE=" + strings.Repeat("app.k=v,", 70) + "session.chat_id=c",
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	verifier, err := propagation.NewVerifier([]propagation.Key{fuzzKey}, propagation.WithClock(func() time.Time { return fuzzTime }))
	if err != nil {
		f.Fatal(err)
	}
	signed := func() map[otelsession.Field]string {
		m := sessionOf(otelsession.Bind(context.Background(), fuzzSession))
		for fl := range m {
			if fl.Scope() == otelsession.Local {
				delete(m, fl)
			}
		}
		return m
	}()

	{ // The oracle below is only as good as this seed: it must be accepted.
		env := newSliceEnv(strings.Split(child, "\n"))
		c := Config{Propagator: fuzzProp, Inbound: propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))}
		ctx, err := c.fromEnvironment(context.Background(), env.lookup, env)
		got := sessionOf(ctx)
		maps.DeleteFunc(got, func(f otelsession.Field, _ string) bool { return f.Scope() == otelsession.Local })
		if err != nil || !maps.Equal(got, signed) {
			f.Fatalf("the signed seed is not accepted (%v): %v", err, got)
		}
	}

	f.Fuzz(func(t *testing.T, input string, verify bool) {
		env := newSliceEnv(strings.Split(input, "\n"))
		c := Config{Propagator: fuzzProp, Inbound: propagation.NewInbound(propagation.TrustAll)}
		if verify {
			c.Inbound = propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
		}
		ctx, err := c.fromEnvironment(context.Background(), env.lookup, env)
		got := states(ctx)

		if err != nil {
			if !slices.ContainsFunc(reasons, func(r error) bool { return errors.Is(err, r) }) {
				t.Fatalf("error wraps none of the known reasons: %v", err)
			}
			for f, st := range got {
				if st.state != otelsession.Unset {
					t.Fatalf("refused (%v) but %s is %v", err, f, st.state)
				}
			}
			for _, m := range baggage.FromContext(ctx).Members() {
				if isOwnedKey(m.Key()) {
					t.Fatalf("refused (%v) but %s is in the baggage", err, m.Key())
				}
			}
			if otelsession.Cwd(ctx) != "" {
				t.Fatalf("refused (%v) but the working directory is %q", err, otelsession.Cwd(ctx))
			}
		} else {
			stock := states(otelprop.Baggage{}.Extract(context.Background(), env))
			remote := map[otelsession.Field]string{}
			// From a parent the policy distrusts (verify), the local fields
			// are read only beside a session it accepted.
			readLocals := !verify || propagation.HasSession(baggage.FromContext(ctx))
			for _, f := range otelsession.Fields() {
				v := got[f]
				if v.state == otelsession.Set && (!utf8.ValidString(v.value) || len(v.value) > otelsession.MaxValueBytes ||
					strings.IndexByte(v.value, 0) >= 0) {
					t.Fatalf("accepted %s = %q, which Bind could not produce", f, v.value)
				}
				if f.Scope() == otelsession.Local {
					want := stateOfVar(env, f.Name())
					if !readLocals {
						want = stateOfVar(newSliceEnv(nil), f.Name())
					}
					if v != want {
						t.Fatalf("local field %s = %+v, its variable says %+v", f, v, want)
					}
					continue
				}
				if v.state != otelsession.Unset {
					remote[f] = v.value
				}
				want := stock[f]
				if f.Class() == otelsession.ClassDisplay && want.state == otelsession.Set {
					// A display value is cut or dropped as Bind would, not refused.
					if nv, _ := otelsession.ValidateValue(f.Spec(), want.value); nv != want.value {
						want.value = nv
						if nv == "" {
							want.state = otelsession.Cleared
						}
					}
				}
				if !verify && v != want {
					t.Fatalf("%s = %+v, the stock propagator extracts %+v", f, v, stock[f])
				}
			}
			if verify && len(remote) > 0 && !maps.Equal(remote, signed) {
				t.Fatalf("a session other than the signed one was accepted without trust: %v", remote)
			}
			// So are the working directory and the delegated-child mark.
			if cwd, _ := env.lookup(CwdVar); otelsession.Cwd(ctx) != cwd && (readLocals || otelsession.Cwd(ctx) != "") {
				t.Fatalf("working directory %q, the variable says %q", otelsession.Cwd(ctx), cwd)
			}
			if d, _ := env.lookup(DelegatedChildVar); otelsession.IsDelegatedChild(ctx) != (d != "" && readLocals) {
				t.Fatalf("delegated = %v with %s=%q", otelsession.IsDelegatedChild(ctx), DelegatedChildVar, d)
			}
		}

		ctx2, err2 := c.fromEnvironment(context.Background(), env.lookup, env)
		if (err == nil) != (err2 == nil) || !maps.Equal(got, states(ctx2)) {
			t.Fatalf("same input, different outcomes: %v, then %v", err, err2)
		}
	})
}

type fieldState struct {
	value string
	state otelsession.State
}

func states(ctx context.Context) map[otelsession.Field]fieldState {
	m := map[otelsession.Field]fieldState{}
	for _, f := range otelsession.Fields() {
		v, st := otelsession.Lookup(ctx, f)
		m[f] = fieldState{v, st}
	}
	return m
}

// stateOfVar is what a local field must be for its variable: absent is
// Unset, empty is Cleared.
func stateOfVar(env sliceEnv, name string) fieldState {
	v, ok := env.lookup(name)
	switch {
	case !ok:
		return fieldState{"", otelsession.Unset}
	case v == "":
		return fieldState{"", otelsession.Cleared}
	}
	return fieldState{v, otelsession.Set}
}

func sessionOf(ctx context.Context) map[otelsession.Field]string {
	m := map[otelsession.Field]string{}
	for _, f := range otelsession.Fields() {
		if v, st := otelsession.Lookup(ctx, f); st != otelsession.Unset {
			m[f] = v
		}
	}
	return m
}

func isOwnedKey(key string) bool {
	if _, ok := otelsession.FieldByKey(key); ok {
		return true
	}
	return key == otelsession.AsyncDeliveryKey || key == otelsession.CwdKey || key == otelsession.SignatureKey
}

// The child-side policy can verify too: a child that does not trust its
// parent (a sandboxed tool, say) accepts the session only with a signature
// that verifies, and refuses one whose BAGGAGE was changed.
func TestChildVerifiesTheSignature(t *testing.T) {
	verifier, err := propagation.NewVerifier([]propagation.Key{fuzzKey}, propagation.WithClock(func() time.Time { return fuzzTime.Add(time.Second) }))
	if err != nil {
		t.Fatal(err)
	}
	child := signedChildEnv(t)
	tampered := slices.Clone(child)
	for i, kv := range tampered {
		if strings.HasPrefix(kv, "BAGGAGE=") {
			tampered[i] = strings.Replace(kv, "session.scope_id=guild-7", "session.scope_id=guild-8", 1)
		}
	}
	if slices.Equal(child, tampered) {
		t.Fatal("test setup: nothing tampered")
	}
	c := Config{Propagator: fuzzProp, Inbound: propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))}
	for _, tc := range []struct {
		name string
		env  []string
		want error
	}{
		{"as the parent wrote it", child, nil},
		{"scope changed in BAGGAGE", tampered, propagation.ErrBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newSliceEnv(tc.env)
			ctx, err := c.fromEnvironment(context.Background(), env.lookup, env)
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			scope, _ := otelsession.Lookup(ctx, otelsession.FieldScopeID)
			tab, _ := otelsession.Lookup(ctx, otelsession.FieldUISessionID)
			if tc.want == nil && (scope != "guild-7" || tab != "tab-3" || otelsession.Cwd(ctx) != "/srv/work") {
				t.Errorf("scope %q, tab %q, cwd %q: want the parent's session", scope, tab, otelsession.Cwd(ctx))
			}
			if tc.want != nil && (scope != "" || tab != "") {
				t.Errorf("refused, but scope %q, tab %q", scope, tab)
			}
		})
	}
}
