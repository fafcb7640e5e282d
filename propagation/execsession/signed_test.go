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
