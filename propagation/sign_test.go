package propagation_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

// signTime is when the test signatures are issued (2026-01-01T00:00:00Z).
var signTime = time.Unix(1_767_225_600, 0)

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// testKey is a key with a deterministic 32-byte secret derived from its id.
func testKey(id string) propagation.Key {
	return propagation.Key{ID: id, Secret: []byte(fmt.Sprintf("%-32s", "secret of "+id))}
}

func mustSigner(t testing.TB, key propagation.Key, at time.Time) *propagation.Signer {
	t.Helper()
	s, err := propagation.NewSigner(key, propagation.WithClock(fixedClock(at)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustVerifier(t testing.TB, at time.Time, keys ...propagation.Key) *propagation.Verifier {
	t.Helper()
	v, err := propagation.NewVerifier(keys, propagation.WithClock(fixedClock(at)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// headerLines is the baggage header of ctx as a stock propagator injects it.
func headerLines(ctx context.Context) []string {
	h := http.Header{}
	otelprop.Baggage{}.Inject(ctx, otelprop.HeaderCarrier(h))
	return h.Values("Baggage")
}

// withForeign adds a member that is not a session field to ctx's baggage.
func withForeign(t testing.TB, ctx context.Context, key, value string) context.Context {
	t.Helper()
	m, err := baggage.NewMemberRaw(key, value)
	if err != nil {
		t.Fatal(err)
	}
	b, err := baggage.FromContext(ctx).SetMember(m)
	if err != nil {
		t.Fatal(err)
	}
	return baggage.ContextWithBaggage(ctx, b)
}

// remoteSession is what a receiver must read for s: every remote field with
// its state, local fields Unset.
func remoteSession(s otelsession.Session) map[otelsession.Field]fieldSeen {
	ctx := otelsession.Bind(context.Background(), s)
	want := sessionSeen(ctx)
	for _, f := range otelsession.Fields() {
		if f.Scope() == otelsession.Local {
			want[f] = fieldSeen{otelsession.Unset, ""}
		}
	}
	return want
}

func allUnset() map[otelsession.Field]fieldSeen {
	return sessionSeen(context.Background())
}

func TestSignatureConfigIsChecked(t *testing.T) {
	good := testKey("k1")
	cases := []struct {
		name string
		keys []propagation.Key
		opts []propagation.SignatureOption
		ok   bool
	}{
		{"one good key", []propagation.Key{good}, nil, true},
		{"two keys for a rotation", []propagation.Key{good, testKey("k2")}, nil, true},
		{"key id of 32 bytes", []propagation.Key{testKey(strings.Repeat("a", 32))}, nil, true},
		{"key id with - and _", []propagation.Key{testKey("2026-12_b")}, nil, true},
		{"no key", nil, nil, false},
		{"empty key id", []propagation.Key{{ID: "", Secret: good.Secret}}, nil, false},
		{"key id of 33 bytes", []propagation.Key{testKey(strings.Repeat("a", 33))}, nil, false},
		{"key id with a dot, the signature's separator", []propagation.Key{{ID: "k.1", Secret: good.Secret}}, nil, false},
		{"key id with a space", []propagation.Key{{ID: "k 1", Secret: good.Secret}}, nil, false},
		{"key id with non-ASCII letters", []propagation.Key{{ID: "ключ", Secret: good.Secret}}, nil, false},
		{"secret of 31 bytes", []propagation.Key{{ID: "k1", Secret: good.Secret[:31]}}, nil, false},
		{"no secret", []propagation.Key{{ID: "k1"}}, nil, false},
		{"one id twice", []propagation.Key{good, good}, nil, false},
		{"zero max age", []propagation.Key{good}, []propagation.SignatureOption{propagation.WithMaxAge(0)}, false},
		{"negative max skew", []propagation.Key{good}, []propagation.SignatureOption{propagation.WithMaxSkew(-time.Second)}, false},
		{"zero max skew", []propagation.Key{good}, []propagation.SignatureOption{propagation.WithMaxSkew(0)}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := propagation.NewVerifier(tc.keys, tc.opts...)
			if tc.ok != (err == nil) {
				t.Fatalf("NewVerifier: err = %v, want ok = %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, propagation.ErrSignatureConfig) {
				t.Errorf("NewVerifier: err = %v, want it to wrap ErrSignatureConfig", err)
			}
			if len(tc.keys) == 1 {
				// A Signer ignores the window options, which are the
				// verifier's: only its key decides.
				keyOK := tc.ok || tc.opts != nil
				_, err := propagation.NewSigner(tc.keys[0], tc.opts...)
				if keyOK != (err == nil) {
					t.Errorf("NewSigner: err = %v, want ok = %v", err, keyOK)
				}
			}
		})
	}
}

// The verifier copies the secrets it is given: a caller that zeroes its
// buffer afterwards (as it should) does not break verification.
func TestSignatureKeysAreCopied(t *testing.T) {
	key := testKey("k1")
	secret := append([]byte(nil), key.Secret...)
	key.Secret = secret
	signer := mustSigner(t, key, signTime)
	verifier := mustVerifier(t, signTime, key)
	clear(secret)
	ctx, err := signer.Sign(otelsession.Bind(context.Background(), otelsession.Session{ChatID: "c"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := verifier.Verify(ctx, ""); err != nil {
		t.Errorf("Verify after the caller cleared its secret: %v", err)
	}
}

var signatureShape = regexp.MustCompile(`^v1\.k1\.1767225600\.[A-Za-z0-9_-]{43}$`)

func TestSignAddsOneMember(t *testing.T) {
	signer := mustSigner(t, testKey("k1"), signTime)
	ctx := withForeign(t, otelsession.Bind(context.Background(), fullTestSession), "app.tenant", "acme")
	before := baggage.FromContext(ctx)

	signed, err := signer.Sign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := baggage.FromContext(signed)
	sig := after.Member(otelsession.SignatureKey).Value()
	if !signatureShape.MatchString(sig) {
		t.Errorf("signature %q, want the shape %s", sig, signatureShape)
	}
	if after.Len() != before.Len()+1 {
		t.Errorf("%d members after signing, want %d + 1", after.Len(), before.Len())
	}
	for _, m := range before.Members() {
		if got := after.Member(m.Key()); got.String() != m.String() {
			t.Errorf("member %s changed from %q to %q", m.Key(), m, got)
		}
	}
	if baggage.FromContext(ctx).Member(otelsession.SignatureKey).Key() != "" {
		t.Error("Sign changed the caller's context")
	}
	if got := signer.KeyID(); got != "k1" {
		t.Errorf("KeyID() = %q", got)
	}

	// Signing again replaces the signature: still one member.
	later := mustSigner(t, testKey("k1"), signTime.Add(time.Minute))
	again, err := later.Sign(signed)
	if err != nil {
		t.Fatal(err)
	}
	b := baggage.FromContext(again)
	if b.Len() != after.Len() || b.Member(otelsession.SignatureKey).Value() == sig {
		t.Errorf("re-signing: %d members (want %d), signature %q (want a new one)", b.Len(), after.Len(), b.Member(otelsession.SignatureKey).Value())
	}
}

// Every otelsession writer drops the signature, since the session it covered
// changed; the egress helpers remove it with the session.
func TestSignatureLeavesWithTheSession(t *testing.T) {
	signer := mustSigner(t, testKey("k1"), signTime)
	signed, err := signer.Sign(withForeign(t, otelsession.Bind(context.Background(), otelsession.Session{ChatID: "c"}), "app.tenant", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("With drops it", func(t *testing.T) {
		ctx := otelsession.With(signed, otelsession.FieldThreadID, "t")
		if baggage.FromContext(ctx).Member(otelsession.SignatureKey).Key() != "" {
			t.Error("the signature survived a change of the session")
		}
	})
	t.Run("WithoutSession drops it", func(t *testing.T) {
		b := baggage.FromContext(propagation.WithoutSession(signed))
		if b.Member(otelsession.SignatureKey).Key() != "" || b.Member("app.tenant").Value() != "acme" {
			t.Errorf("WithoutSession left %q", b)
		}
	})
	t.Run("WithoutSession drops a signature alone", func(t *testing.T) {
		m, _ := baggage.NewMemberRaw(otelsession.SignatureKey, baggage.FromContext(signed).Member(otelsession.SignatureKey).Value())
		b, _ := baggage.New(m)
		ctx := propagation.WithoutSession(baggage.ContextWithBaggage(context.Background(), b))
		if got := baggage.FromContext(ctx); got.Len() != 0 {
			t.Errorf("WithoutSession left %q", got)
		}
	})
	t.Run("a refusing Outbound drops it from a pre-written header", func(t *testing.T) {
		h := http.Header{"Baggage": headerLines(signed)}
		err := propagation.NewOutbound(propagation.AllowNone).Inject(context.Background(), w3cProp,
			otelprop.HeaderCarrier(h), propagation.Dest{Transport: propagation.TransportHTTP, Name: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Values("Baggage"); len(got) != 1 || got[0] != "app.tenant=acme" {
			t.Errorf("left %q", got)
		}
	})
}

func TestSignReportsWhenTheSignatureDoesNotFit(t *testing.T) {
	signer := mustSigner(t, testKey("k1"), signTime)
	session := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C1"})
	cases := []struct {
		name string
		ctx  func(t *testing.T) context.Context
		ok   bool
	}{
		{"63 members: room for one more", func(t *testing.T) context.Context {
			return fill(t, session, 63-baggage.FromContext(session).Len(), 1)
		}, true},
		{"64 members: no room", func(t *testing.T) context.Context {
			return fill(t, session, 64-baggage.FromContext(session).Len(), 1)
		}, false},
		{"a few bytes short", func(t *testing.T) context.Context {
			return fill(t, session, 1, otelsession.MaxBaggageBytes-len(strings.Join(headerLines(session), ","))-60)
		}, false},
		{"room to spare in bytes", func(t *testing.T) context.Context {
			return fill(t, session, 1, otelsession.MaxBaggageBytes-len(strings.Join(headerLines(session), ","))-200)
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx(t)
			if n := baggage.FromContext(ctx).Len(); n > otelsession.MaxBaggageMembers {
				t.Fatalf("test setup: %d members", n)
			}
			signed, err := signer.Sign(ctx)
			if tc.ok {
				if err != nil {
					t.Fatalf("Sign: %v", err)
				}
				if n := len(strings.Join(headerLines(signed), ",")); n > otelsession.MaxBaggageBytes {
					t.Errorf("signed baggage is %d bytes", n)
				}
				return
			}
			if !errors.Is(err, propagation.ErrSignatureNoRoom) {
				t.Fatalf("Sign: err = %v, want ErrSignatureNoRoom", err)
			}
			if baggage.FromContext(signed).Member(otelsession.SignatureKey).Key() != "" {
				t.Error("a failed Sign left a signature")
			}
		})
	}
}

// fill adds n foreign members to ctx whose values total about size bytes.
func fill(t *testing.T, ctx context.Context, n, size int) context.Context {
	t.Helper()
	for i := range n {
		v := "v"
		if i == 0 && size > 20 {
			v = strings.Repeat("x", size-20)
		}
		ctx = withForeign(t, ctx, fmt.Sprintf("app.f%d", i), v)
	}
	return ctx
}

// signedView is what the application behind httpsession.Handler saw.
type signedView struct {
	fields   map[otelsession.Field]fieldSeen
	sig      string // the session.sig member of its context
	verified error  // a downstream Verifier's verdict on its context
	errs     []error
}

// signedServer is a real HTTP server on 127.0.0.1 behind httpsession.Handler
// with policy; its application re-verifies what it got with downstream, as
// the next hop would.
type signedServer struct {
	url    string
	policy *propagation.Inbound
	views  chan signedView
}

func startSignedServer(t *testing.T, policy *propagation.Inbound, downstream *propagation.Verifier) *signedServer {
	t.Helper()
	s := &signedServer{policy: policy, views: make(chan signedView, 1)}
	errs := make(chan error, 1)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := signedView{
			fields:   sessionSeen(r.Context()),
			sig:      baggage.FromContext(r.Context()).Member(otelsession.SignatureKey).Value(),
			verified: downstream.Verify(r.Context(), ""),
		}
		select {
		case err := <-errs:
			v.errs = append(v.errs, err)
		default:
		}
		s.views <- v
		w.WriteHeader(http.StatusNoContent)
	})
	h := httpsession.Handler(app, httpsession.WithPropagator(w3cProp), httpsession.WithInbound(policy),
		httpsession.WithOnError(func(_ *http.Request, err error) { errs <- err }))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// send makes a request from ctx through an httpsession.Transport whose egress
// allows the server, or, with lines, with exactly those baggage lines.
func (s *signedServer) send(t *testing.T, ctx context.Context, lines ...string) signedView {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	var rt http.RoundTripper = &httpsession.Transport{Base: base, Propagator: w3cProp, Outbound: propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Prefixes: []string{s.url}}))}
	if lines != nil {
		req.Header["Baggage"] = lines
		rt = base
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	select {
	case v := <-s.views:
		return v
	default:
		t.Fatal("the handler did not run")
		return signedView{}
	}
}

// Across a real HTTP hop, through the client Transport: a signed session
// from a peer the server does not trust is accepted whole, keeps its
// signature for the next hop (which verifies it too), and an unsigned one
// is stripped as before.
func TestSignedSessionOverHTTP(t *testing.T) {
	key := testKey("k1")
	signer := mustSigner(t, key, signTime)
	verifier := mustVerifier(t, signTime.Add(time.Minute), key)
	s := fullTestSession
	s.ChatName, s.Stateless = "", true // a Cleared field, and the async-delivery member
	bound := withForeign(t, otelsession.Bind(context.Background(), s), "app.tenant", "acme")
	signed, err := signer.Sign(bound)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("signed", func(t *testing.T) {
		srv := startSignedServer(t, propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier)), verifier)
		v := srv.send(t, signed)
		if !maps.Equal(v.fields, remoteSession(s)) {
			t.Errorf("session = %v, want %v", v.fields, remoteSession(s))
		}
		if want := baggage.FromContext(signed).Member(otelsession.SignatureKey).Value(); v.sig != want {
			t.Errorf("signature in the handler's context = %q, want the one sent, %q", v.sig, want)
		}
		if v.verified != nil {
			t.Errorf("the next hop could not verify the forwarded signature: %v", v.verified)
		}
		if len(v.errs) > 0 {
			t.Errorf("OnError got %v", v.errs)
		}
		if got, want := srv.policy.Counts(), (propagation.Counts{Accepted: 1, Signed: 1}); got != want {
			t.Errorf("counts = %+v, want %+v", got, want)
		}
	})
	t.Run("unsigned", func(t *testing.T) {
		srv := startSignedServer(t, propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier)), verifier)
		v := srv.send(t, bound)
		if !maps.Equal(v.fields, allUnset()) || v.sig != "" {
			t.Errorf("unsigned session from an untrusted peer reached the handler: %v, sig %q", v.fields, v.sig)
		}
		if len(v.errs) > 0 {
			t.Errorf("OnError got %v: an unsigned session is untrusted, not an error", v.errs)
		}
		if got, want := srv.policy.Counts(), (propagation.Counts{Untrusted: 1}); got != want {
			t.Errorf("counts = %+v, want %+v", got, want)
		}
	})
	t.Run("signed, to a server without a verifier", func(t *testing.T) {
		srv := startSignedServer(t, propagation.NewInbound(propagation.TrustNone), verifier)
		v := srv.send(t, signed)
		if !maps.Equal(v.fields, allUnset()) || v.sig != "" {
			t.Errorf("a server that checks no signature accepted one: %v, sig %q", v.fields, v.sig)
		}
		if got, want := srv.policy.Counts(), (propagation.Counts{Untrusted: 1}); got != want {
			t.Errorf("counts = %+v, want %+v", got, want)
		}
	})
}

// A trusted peer's session is accepted with or without a signature, but a
// signature it relays must still verify: a failing one means the session was
// changed after it was signed, whoever relays it.
func TestTrustedPeerWithAVerifier(t *testing.T) {
	key := testKey("k1")
	verifier := mustVerifier(t, signTime, key)
	session := otelsession.Session{Platform: "slack", ChatID: "C1", ThreadID: "T1"}
	bound := otelsession.Bind(context.Background(), session)
	good, err := mustSigner(t, key, signTime).Sign(bound)
	if err != nil {
		t.Fatal(err)
	}
	old, err := mustSigner(t, key, signTime.Add(-time.Hour)).Sign(bound)
	if err != nil {
		t.Fatal(err)
	}
	tampered := strings.Replace(strings.Join(headerLines(good), ","), "session.thread_id=T1", "session.thread_id=T2", 1)

	cases := []struct {
		name    string
		lines   []string
		wantErr error
		counts  propagation.Counts
	}{
		{"unsigned", headerLines(bound), nil, propagation.Counts{Accepted: 1}},
		{"signed", headerLines(good), nil, propagation.Counts{Accepted: 1, Signed: 1}},
		{"tampered", []string{tampered}, propagation.ErrBadSignature, propagation.Counts{BadSignature: 1}},
		{"expired", headerLines(old), propagation.ErrSignatureExpired, propagation.Counts{Expired: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := startSignedServer(t, propagation.NewInbound(propagation.TrustLoopback(), propagation.WithVerifier(verifier)), verifier)
			v := srv.send(t, context.Background(), tc.lines...)
			want := remoteSession(session)
			if tc.wantErr != nil {
				want = allUnset()
				if len(v.errs) != 1 || !errors.Is(v.errs[0], tc.wantErr) {
					t.Errorf("OnError got %v, want one error wrapping %v", v.errs, tc.wantErr)
				}
			}
			if !maps.Equal(v.fields, want) {
				t.Errorf("session = %v, want %v", v.fields, want)
			}
			if got := srv.policy.Counts(); got != tc.counts {
				t.Errorf("counts = %+v, want %+v", got, tc.counts)
			}
		})
	}
}

// Key rotation: one key signs, several verify. Add the new key to every
// verifier, switch the signer, then retire the old key.
func TestKeyRotation(t *testing.T) {
	oldKey, newKey := testKey("2026-11"), testKey("2026-12")
	bound := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C1"})
	sign := func(k propagation.Key) context.Context {
		ctx, err := mustSigner(t, k, signTime).Sign(bound)
		if err != nil {
			t.Fatal(err)
		}
		return ctx
	}
	byOld, byNew := sign(oldKey), sign(newKey)
	phases := []struct {
		name       string
		verifyKeys []propagation.Key
		old, new   error // the verdict on a signature by each key
	}{
		{"before: the old key only", []propagation.Key{oldKey}, nil, propagation.ErrUnknownKey},
		{"step 1: verifiers learn the new key", []propagation.Key{oldKey, newKey}, nil, nil},
		{"step 2: the signer switches (in-flight old signatures still pass)", []propagation.Key{newKey, oldKey}, nil, nil},
		{"step 3: the old key is retired", []propagation.Key{newKey}, propagation.ErrUnknownKey, nil},
	}
	for _, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			v := mustVerifier(t, signTime, ph.verifyKeys...)
			for _, c := range []struct {
				name string
				ctx  context.Context
				want error
			}{{"old key", byOld, ph.old}, {"new key", byNew, ph.new}} {
				policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(v))
				ctx, err := policy.Extract(context.Background(), otelprop.Baggage{},
					otelprop.HeaderCarrier{"Baggage": headerLines(c.ctx)}, propagation.Peer{Transport: "test"})
				if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
					t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
				}
				_, st := otelsession.Lookup(ctx, otelsession.FieldChatID)
				if wantSt := map[bool]otelsession.State{true: otelsession.Set, false: otelsession.Unset}[c.want == nil]; st != wantSt {
					t.Errorf("%s: chat id %v, want %v", c.name, st, wantSt)
				}
				if c.want != nil && policy.Counts().UnknownKey != 1 {
					t.Errorf("%s: counts %+v, want one unknown key", c.name, policy.Counts())
				}
			}
		})
	}
}

// The window is inclusive at both ends: a signature exactly the maximum age
// old, or exactly the maximum skew ahead, passes; one second more does not.
func TestSignatureWindow(t *testing.T) {
	key := testKey("k1")
	bound := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C1"})
	signed, err := mustSigner(t, key, signTime).Sign(bound)
	if err != nil {
		t.Fatal(err)
	}
	const maxAge, maxSkew = 2 * time.Minute, 10 * time.Second
	cases := []struct {
		name string
		now  time.Time
		want error
	}{
		{"at issue", signTime, nil},
		{"max age old", signTime.Add(maxAge), nil},
		{"max age and a second old", signTime.Add(maxAge + time.Second), propagation.ErrSignatureExpired},
		{"a day old", signTime.Add(24 * time.Hour), propagation.ErrSignatureExpired},
		{"max skew ahead", signTime.Add(-maxSkew), nil},
		{"max skew and a second ahead", signTime.Add(-maxSkew - time.Second), propagation.ErrSignatureExpired},
		{"a year ahead", signTime.Add(-365 * 24 * time.Hour), propagation.ErrSignatureExpired},
		// Further apart than a time.Duration holds (292 years): the
		// difference saturates, and its negation overflowed, so a signature
		// issued that far ahead never expired.
		{"300 years ahead", signTime.AddDate(-300, 0, 0), propagation.ErrSignatureExpired},
		{"300 years old", signTime.AddDate(300, 0, 0), propagation.ErrSignatureExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := propagation.NewVerifier([]propagation.Key{key}, propagation.WithClock(fixedClock(tc.now)),
				propagation.WithMaxAge(maxAge), propagation.WithMaxSkew(maxSkew))
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Verify(signed, ""); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("Verify: %v, want %v", err, tc.want)
			}
		})
	}
}

// A signature bound to a message id verifies only on that message, and is
// consumed there: the accepted context no longer carries it.
func TestSignatureBoundToAMessage(t *testing.T) {
	key := testKey("k1")
	signer := mustSigner(t, key, signTime)
	verifier := mustVerifier(t, signTime, key)
	bound := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C1"})
	forM1, err := signer.SignFor(bound, "m-1")
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := signer.Sign(bound)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		signed    context.Context
		messageID string
		want      error
	}{
		{"on its message", forM1, "m-1", nil},
		{"moved to another message", forM1, "m-2", propagation.ErrBadSignature},
		{"moved to a carrier without a message id", forM1, "", propagation.ErrBadSignature},
		{"unbound, on a carrier without a message id", unbound, "", nil},
		{"unbound, moved onto a message with an id", unbound, "m-1", propagation.ErrBadSignature},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
			ctx, err := policy.Extract(context.Background(), otelprop.Baggage{},
				otelprop.HeaderCarrier{"Baggage": headerLines(tc.signed)}, propagation.Peer{Transport: "test", MessageID: tc.messageID})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			v, _ := otelsession.Lookup(ctx, otelsession.FieldChatID)
			sig := baggage.FromContext(ctx).Member(otelsession.SignatureKey).Key() != ""
			switch {
			case tc.want != nil && (v != "" || sig):
				t.Errorf("refused, but chat id %q and signature present %v", v, sig)
			case tc.want == nil && v != "C1":
				t.Errorf("chat id %q, want C1", v)
			case tc.want == nil && sig != (tc.messageID == ""):
				t.Errorf("signature kept = %v; a bound signature ends with its message, an unbound one travels on", sig)
			}
		})
	}
}

// Verify reports a context without a signature as not verifying.
func TestVerifyWithoutASignature(t *testing.T) {
	v := mustVerifier(t, signTime, testKey("k1"))
	ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "c"})
	if err := v.Verify(ctx, ""); !errors.Is(err, propagation.ErrBadSignature) {
		t.Errorf("Verify = %v, want ErrBadSignature", err)
	}
	if got := v.KeyIDs(); len(got) != 1 || got[0] != "k1" {
		t.Errorf("KeyIDs() = %q", got)
	}
}

// Example of the whole signed path on one machine: the gateway binds and
// signs, the worker's policy trusts no peer but verifies signatures.
func ExampleSigner() {
	key := propagation.Key{ID: "2026-12", Secret: []byte("use 32 random bytes from crypto/rand")}
	signer, _ := propagation.NewSigner(key)
	verifier, _ := propagation.NewVerifier([]propagation.Key{key})

	// Gateway: bind, then sign last.
	ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "telegram", ChatID: "42", ThreadID: "7"})
	ctx, err := signer.Sign(ctx)
	if err != nil {
		panic(err)
	}
	header := http.Header{}
	otelprop.Baggage{}.Inject(ctx, otelprop.HeaderCarrier(header))

	// Worker: no peer is trusted, signed sessions are accepted.
	policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
	got, err := policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(header), propagation.Peer{Transport: "http"})
	thread, _ := otelsession.Lookup(got, otelsession.FieldThreadID)
	fmt.Println(thread, err, policy.Counts().Signed)

	// A forged thread id breaks the signature.
	header.Set("Baggage", strings.Replace(header.Get("Baggage"), "session.thread_id=7", "session.thread_id=8", 1))
	got, err = policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(header), propagation.Peer{Transport: "http"})
	thread, _ = otelsession.Lookup(got, otelsession.FieldThreadID)
	fmt.Printf("%q %v\n", thread, errors.Is(err, propagation.ErrBadSignature))
	// Output:
	// 7 <nil> 1
	// "" true
}

// SignatureHeader reads what a signature says of itself (key id, issue
// time), and refuses what is not a well-formed signature, as Verify would.
func TestSignatureHeader(t *testing.T) {
	ctx, err := mustSigner(t, testKey("k-2026"), signTime).Sign(
		otelsession.Bind(context.Background(), otelsession.Session{Platform: "telegram", ChatID: "c1"}))
	if err != nil {
		t.Fatal(err)
	}
	sig := baggage.FromContext(ctx).Member(otelsession.SignatureKey).Value()
	kid, issued, err := propagation.SignatureHeader(sig)
	if err != nil || kid != "k-2026" || !issued.Equal(signTime) {
		t.Fatalf("SignatureHeader(%q) = %q, %v, %v; want k-2026, %v", sig, kid, issued, err, signTime)
	}
	for _, bad := range []string{"", "v2.k.1767225600.x", "v1.k.01767225600." + strings.Repeat("A", 43), sig + "A"} {
		if _, _, err := propagation.SignatureHeader(bad); !errors.Is(err, propagation.ErrBadSignature) {
			t.Errorf("SignatureHeader(%q): %v, want ErrBadSignature", bad, err)
		}
	}
}
