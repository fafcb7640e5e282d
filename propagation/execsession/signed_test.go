package execsession_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/execsession"
)

var signingKey = propagation.Key{ID: "k1", Secret: []byte("execsession test secret, 32 bytes+")}

// verifyBaggage is what a downstream service does with a BAGGAGE value it
// received: extract it through a policy that trusts nobody and verifies.
func verifyBaggage(t *testing.T, value string) (context.Context, error) {
	t.Helper()
	v, err := propagation.NewVerifier([]propagation.Key{signingKey})
	require.NoError(t, err)
	policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(v))
	return policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.MapCarrier{"baggage": value}, propagation.Peer{Transport: "env"})
}

// A child trusts its parent, so it does not need the key: the signature
// passes through BAGGAGE to the child and on to a grandchild (started by
// the child with Command from its restored context), where anything
// holding a verify key can still check it.
func TestSignaturePassesThroughChildAndGrandchild(t *testing.T) {
	t.Parallel()
	signer, err := propagation.NewSigner(signingKey)
	require.NoError(t, err)
	s := fullSession(t.TempDir())
	ctx, err := signer.Sign(otelsession.Bind(testCtx(t), s))
	require.NoError(t, err)
	sig := baggage.FromContext(ctx).Member(otelsession.SignatureKey).Value()
	require.NotEmpty(t, sig)

	r := child(t, execsession.Command(ctx, os.Args[0], "-test.run=^$"), modeRelay)
	require.Empty(t, r.Err)
	require.NotNil(t, r.Grandchild)
	require.Empty(t, r.Grandchild.Err)

	for name, rep := range map[string]*report{"child": r, "grandchild": r.Grandchild} {
		bg, err := baggage.Parse(rep.Env["BAGGAGE"])
		require.NoError(t, err, name)
		assert.Equal(t, sig, bg.Member(otelsession.SignatureKey).Value(), "%s: the signature in BAGGAGE", name)

		got, err := verifyBaggage(t, rep.Env["BAGGAGE"])
		require.NoError(t, err, "%s: a downstream verifier refused the signature", name)
		for _, f := range otelsession.Fields() {
			if f.Scope() != otelsession.Remote {
				continue
			}
			want, wantSt := otelsession.Lookup(ctx, f)
			v, st := otelsession.Lookup(got, f)
			assert.Equal(t, wantSt, st, "%s: %s", name, f)
			assert.Equal(t, want, v, "%s: %s", name, f)
		}
		// The child still restored its local state beside the signed part.
		requireSeen(t, rep, otelsession.FieldUISessionID, s.UISessionID, otelsession.Set)
	}
}

// The signature covers the session the parent signed, nothing more: a
// session changed on the way (here by the parent itself, after signing, in
// the environment it builds) no longer verifies downstream.
func TestSignatureDoesNotSurviveAChangedSession(t *testing.T) {
	t.Parallel()
	signer, err := propagation.NewSigner(signingKey)
	require.NoError(t, err)
	ctx, err := signer.Sign(otelsession.Bind(testCtx(t), fullSession("/srv")))
	require.NoError(t, err)

	// Written with otelsession: the signature is dropped with the change.
	changed := otelsession.With(ctx, otelsession.FieldScopeID, "other-guild")
	r := child(t, execsession.Command(changed, os.Args[0], "-test.run=^$"), modeReport)
	require.Empty(t, r.Err)
	assert.NotContains(t, r.Env["BAGGAGE"], otelsession.SignatureKey)
	got, err := verifyBaggage(t, r.Env["BAGGAGE"])
	require.NoError(t, err, "an unsigned session from an untrusted peer is stripped, not an error")
	_, st := otelsession.Lookup(got, otelsession.FieldScopeID)
	assert.Equal(t, otelsession.Unset, st, "an unsigned session reached a service that trusts nobody")

	// Edited in the environment by hand: the signature stays and fails.
	env := execsession.Environ(ctx, nil)
	found := false
	for i, kv := range env {
		if strings.HasPrefix(kv, "BAGGAGE=") {
			found = true
			env[i] = strings.Replace(kv, "session.scope_id=guild-7", "session.scope_id=guild-8", 1)
			require.NotEqual(t, kv, env[i], "test setup: nothing changed")
			_, err := verifyBaggage(t, strings.TrimPrefix(env[i], "BAGGAGE="))
			assert.True(t, errors.Is(err, propagation.ErrBadSignature), "err = %v, want ErrBadSignature", err)
		}
	}
	require.True(t, found, "no BAGGAGE in %q", env)
}

// A child given a policy that trusts no parent takes the session from a
// verified BAGGAGE alone. The parent also writes the legacy HERMES_*
// variables, and nothing verifies them: read through otelsession.Getenv they
// used to put back a stripped session (a forged chat id read as the chat) or
// fill in a field the signed session left Unset (a thread id beside a
// signed chat). Now they read as absent there, and the child does not pass
// them on to a grandchild. The local fields, which cannot be signed, are
// read beside a verified session only.
func TestAChildThatDistrustsItsParentReadsNoUnverifiedVariable(t *testing.T) {
	t.Parallel()
	signer, err := propagation.NewSigner(signingKey)
	require.NoError(t, err)
	// The parent's signed session binds the platform and the chat; the
	// other fields are Unset.
	ctx := otelsession.With(otelsession.With(otelsession.Reset(testCtx(t)),
		otelsession.FieldPlatform, "telegram"), otelsession.FieldChatID, "42")
	signed, err := signer.Sign(ctx)
	require.NoError(t, err)
	hostile := []string{
		"HERMES_SESSION_THREAD_ID=evil-thread", "HERMES_SESSION_SCOPE_ID=evil-scope",
		"HERMES_UI_SESSION_ID=evil-tab", "HERMES_BROWSER_CONTROL_PRINCIPAL=user:evil",
	}
	remote := []otelsession.Field{otelsession.FieldThreadID, otelsession.FieldScopeID}
	local := []otelsession.Field{otelsession.FieldUISessionID, otelsession.FieldBrowserControlPrincipal}
	// start runs a child from ctx, the parent writing the hostile variables
	// and extra beside what Command writes.
	start := func(t *testing.T, ctx context.Context, mode string, extra ...string) *report {
		cmd := execsession.Command(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(append(cmd.Env, hostile...), extra...)
		r := child(t, cmd, mode)
		require.Empty(t, r.Err, "an unsigned session from a distrusted parent is stripped, not an error")
		return r
	}

	t.Run("signed session", func(t *testing.T) {
		t.Parallel()
		r := start(t, signed, modeDistrust)
		for _, rep := range []*report{r, r.Grandchild} {
			assert.Equal(t, fieldSeen{Value: "42", State: "set", Getenv: "42"}, rep.Fields[otelsession.FieldChatID.Name()])
		}
		for _, f := range remote {
			unread(t, r, f)
			requireAbsent(t, r.Grandchild, f) // not passed on either
		}
		for _, rep := range []*report{r, r.Grandchild} {
			requireSeen(t, rep, otelsession.FieldUISessionID, "evil-tab", otelsession.Set)
			requireSeen(t, rep, otelsession.FieldBrowserControlPrincipal, "user:evil", otelsession.Set)
		}
	})
	t.Run("forged session", func(t *testing.T) {
		t.Parallel()
		forged := otelsession.With(ctx, otelsession.FieldChatID, "attacker-chat") // unsigned
		r := start(t, forged, modeDistrust, "HERMES_SESSION_CHAT_ID=attacker-chat",
			execsession.CwdVar+"="+t.TempDir(), execsession.DelegatedChildVar+"=1")
		for _, f := range append(append(remote, local...), otelsession.FieldChatID) {
			unread(t, r, f)
			requireAbsent(t, r.Grandchild, f)
		}
		// Neither can be signed either: not taken, not passed on.
		for _, rep := range []*report{r, r.Grandchild} {
			assert.Empty(t, rep.Cwd, "the working directory")
			assert.False(t, rep.Delegated, "the delegated-child mark")
		}
		assert.NotContains(t, r.Grandchild.Env, execsession.CwdVar)
		assert.NotContains(t, r.Grandchild.Env, execsession.DelegatedChildVar)
	})
	t.Run("signed session, with a working directory and the mark", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		r := start(t, signed, modeDistrust, execsession.CwdVar+"="+dir, execsession.DelegatedChildVar+"=1")
		for _, rep := range []*report{r, r.Grandchild} {
			assert.Equal(t, dir, rep.Cwd, "beside a verified session, as the local fields")
			assert.True(t, rep.Delegated)
		}
	})
	t.Run("a child that trusts its parent reads them", func(t *testing.T) {
		t.Parallel()
		r := start(t, signed, modeReport)
		assert.Equal(t, "evil-thread", r.Fields[otelsession.FieldThreadID.Name()].Getenv, "the legacy fallback, as documented")
		assert.Equal(t, "evil-tab", r.Fields[otelsession.FieldUISessionID.Name()].Value)
	})
}

// unread checks that the child neither bound f nor reads it through
// otelsession.Getenv, though its environment has the variable.
func unread(t *testing.T, r *report, f otelsession.Field) {
	t.Helper()
	require.Contains(t, r.Env, f.Name(), "test setup: the parent did not write %s", f.Name())
	assert.Equal(t, fieldSeen{State: "unset", Getenv: defaultMark}, r.Fields[f.Name()], f.Name())
}
