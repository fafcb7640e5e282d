package httpsession_test

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

// FuzzHandler feeds raw baggage header lines (the input split at "\n") to a
// request served by Handler, whose policy trusts the peer when trusted is
// set and otherwise only accepts sessions signed with testKey. The seeds
// hold one signed session. Whatever the input:
//   - the application handler runs exactly once and the request succeeds;
//   - from an untrusted peer, the session the application sees is wholly
//     Unset or exactly the signed one;
//   - when the application's context holds no session member, neither do
//     the baggage headers it is handed (nothing behind Handler can revive a
//     refused session);
//   - every Set value is valid UTF-8 without NUL, CR or LF.
//
// Run it with
//
//	go test ./propagation/httpsession -run '^$' -fuzz '^FuzzHandler$' -fuzztime 20s -parallel 1
func FuzzHandler(f *testing.F) {
	at := time.Unix(1_767_225_600, 0)
	signer, err := propagation.NewSigner(testKey, propagation.WithClock(func() time.Time { return at }))
	if err != nil {
		f.Fatal(err)
	}
	session := otelsession.Session{Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100", UserID: "U1", Cron: otelsession.CronOff}
	ctx, err := signer.Sign(otelsession.Bind(context.Background(), session))
	if err != nil {
		f.Fatal(err)
	}
	h := http.Header{}
	w3c.Inject(ctx, otelprop.HeaderCarrier(h))
	signed := h.Get("Baggage")
	for _, seed := range []string{
		"", signed, signed + "\napp.x=1", signed + "\n" + signed,
		strings.Replace(signed, "session.user_id=U1", "session.user_id=U2", 1),
		"session.chat_id=c,session.thread_id=t", "session.chat_id=a b", "session.sig=%00",
		"app.x=1,session.chat_id=%FF", "session.ui_session_id=x",
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	verifier, err := propagation.NewVerifier([]propagation.Key{testKey}, propagation.WithClock(func() time.Time { return at }))
	if err != nil {
		f.Fatal(err)
	}
	want := sessionOf(otelsession.Bind(context.Background(), session))
	maps.DeleteFunc(want, func(f otelsession.Field, _ string) bool { return f.Scope() == otelsession.Local })

	{ // The oracle below is only as good as this seed: it must be accepted.
		policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
		ctx, err := policy.Extract(context.Background(), w3c, otelprop.HeaderCarrier{"Baggage": {signed}}, propagation.Peer{Transport: "http"})
		if got := sessionOf(ctx); err != nil || !maps.Equal(got, want) {
			f.Fatalf("the signed seed is not accepted (%v): %v", err, got)
		}
	}

	f.Fuzz(func(t *testing.T, lines string, trusted bool) {
		trust := propagation.TrustNone
		if trusted {
			trust = propagation.TrustAll
		}
		runs := 0
		var seen map[otelsession.Field]string
		var ctxOwned bool
		var handed []string
		app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			seen = sessionOf(r.Context())
			ctxOwned = ownsAny(baggage.FromContext(r.Context()))
			handed = r.Header.Values("Baggage")
			w.WriteHeader(http.StatusNoContent)
		})
		handler := httpsession.Handler(app, httpsession.WithPropagator(w3c),
			httpsession.WithInbound(propagation.NewInbound(trust, propagation.WithVerifier(verifier))))
		req := httptest.NewRequest(http.MethodGet, "http://svc.internal/", nil)
		req.Header["Baggage"] = strings.Split(lines, "\n")
		req.RemoteAddr = "192.0.2.1:4711"
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)

		if runs != 1 || rec.Code != http.StatusNoContent {
			t.Fatalf("application ran %d times, status %d", runs, rec.Code)
		}
		if !trusted && len(seen) > 0 && !maps.Equal(seen, want) {
			t.Fatalf("an untrusted peer's unsigned or forged session was accepted: %v", seen)
		}
		for f, v := range seen {
			if strings.ContainsAny(v, "\x00\r\n") || !utf8.ValidString(v) {
				t.Fatalf("%s = %q", f, v)
			}
		}
		if !ctxOwned {
			for _, l := range handed {
				b, _ := baggage.Parse(l)
				if ownsAny(b) {
					t.Fatalf("the application got no session but a session member in its header %q", l)
				}
			}
		}
	})
}

// ownsAny reports whether b holds a member of the session: a field, the
// async-delivery capability, the working directory or the signature.
func ownsAny(b baggage.Baggage) bool {
	for _, m := range b.Members() {
		k := m.Key()
		if _, ok := otelsession.FieldByKey(k); ok || k == otelsession.AsyncDeliveryKey || k == otelsession.CwdKey || k == otelsession.SignatureKey {
			return true
		}
	}
	return false
}
