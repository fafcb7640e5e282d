package propagation_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// fuzzSignedSession is the one session the signature fuzzer's seeds carry a
// valid signature for (key k1, issued at signTime), once bound to no
// message and once to the message id "m-1".
var fuzzSignedSession = otelsession.Session{
	Platform: "telegram", ChatID: "-100123", ThreadID: "17585", UserID: "u-42", ScopeID: "guild-7",
	MessageID: "88121", Cron: otelsession.CronOff, Stateless: true,
}

// FuzzSignature feeds baggage header lines (the input split at "\n"), a
// carrier message id and the time since signing, in seconds, to a policy
// that trusts no peer and verifies signatures made with k1. Forging is the
// question: the only signatures the fuzzer can know are the seeds', so
// whatever the input:
//   - Extract does not panic;
//   - a session it accepts is exactly fuzzSignedSession (every remote field
//     as signed, nothing added or removed), on a carrier whose message id is
//     "" or "m-1", at most DefaultMaxAge after signing and at most
//     DefaultMaxSkew before;
//   - with an error, the error wraps one of the package's reasons, the
//     session is wholly Unset and no signature is left in the context;
//   - the same input gives the same outcome twice.
//
// Run it with
//
//	go test ./propagation -run '^$' -fuzz '^FuzzSignature$' -fuzztime 20s -parallel 1
func FuzzSignature(f *testing.F) {
	key := testKey("k1")
	signer := mustSigner(f, key, signTime)
	bound := withForeign(f, otelsession.Bind(context.Background(), fuzzSignedSession), "app.tenant", "acme")
	line := func(messageID string) string {
		ctx, err := signer.SignFor(bound, messageID)
		if err != nil {
			f.Fatal(err)
		}
		return strings.Join(headerLines(ctx), ",")
	}
	unbound, forM1 := line(""), line("m-1")
	sig := splitMembers(unbound).value(otelsession.SignatureKey)
	for _, seed := range []struct {
		header, messageID string
		age               int64
	}{
		{unbound, "", 60},
		{forM1, "m-1", 0},
		{forM1, "m-2", 0},
		{unbound, "", 301},
		{unbound, "", -31},
		{unbound + "\napp.x=1", "", 1},
		{unbound + ",session.sig=" + sig, "", 1},
		{strings.Replace(unbound, "session.thread_id=17585", "session.thread_id=17586", 1), "", 1},
		{strings.Replace(unbound, "session.sig=v1.k1.", "session.sig=v1.k0.", 1), "", 1},
		{strings.Replace(unbound, "session.sig=v1.", "session.sig=v2.", 1), "", 1},
		{strings.Replace(unbound, ".1767225600.", ".01767225600.", 1), "", 1},
		{splitMembers(unbound).drop("session.async_delivery").String(), "", 1},
		{splitMembers(unbound).add("session.cron_auto_deliver_chat_id=%00").String(), "", 1},
		{"session.sig=" + sig, "", 1},
		{"session.sig=%00", "", 1},
		{"", "", 0},
	} {
		f.Add(seed.header, seed.messageID, seed.age)
	}
	// One verifier whose clock the fuzz function sets: calls within a
	// fuzzing process are sequential.
	var now atomic.Int64
	verifier, err := propagation.NewVerifier([]propagation.Key{key}, propagation.WithClock(func() time.Time { return time.Unix(now.Load(), 0) }))
	if err != nil {
		f.Fatal(err)
	}
	reasons := []error{propagation.ErrBaggageTooLarge, propagation.ErrMalformedMember, propagation.ErrDuplicateMember,
		propagation.ErrInvalidValue, propagation.ErrLocalField, propagation.ErrUnknownSessionKey, propagation.ErrBadSignature, propagation.ErrSignatureExpired,
		propagation.ErrUnknownKey}
	want := remoteSession(fuzzSignedSession)
	// The oracle below is only as good as the seeds: the genuine ones must be
	// accepted.
	for id, line := range map[string]string{"": unbound, "m-1": forM1} {
		p := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(mustVerifier(f, signTime, key)))
		ctx, err := p.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier{"Baggage": {line}}, propagation.Peer{Transport: "fuzz", MessageID: id})
		if got := sessionSeen(ctx); err != nil || !maps.Equal(got, want) {
			f.Fatalf("the seed signed for %q is not accepted (%v): %v", id, err, got)
		}
	}

	f.Fuzz(func(t *testing.T, header, messageID string, age int64) {
		if age < -1e9 || age > 1e9 { // keep time.Unix arithmetic far from overflow
			return
		}
		now.Store(signTime.Unix() + age)
		h := http.Header{"Baggage": strings.Split(header, "\n")}
		extract := func() (context.Context, propagation.Counts, error) {
			p := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
			ctx, err := p.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(h), propagation.Peer{Transport: "fuzz", MessageID: messageID})
			return ctx, p.Counts(), err
		}
		ctx, counts, err := extract()
		got := sessionSeen(ctx)
		accepted := !maps.Equal(got, allUnset())

		switch {
		case err != nil:
			if !slices.ContainsFunc(reasons, func(r error) bool { return errors.Is(err, r) }) {
				t.Fatalf("error wraps none of the package's reasons: %v", err)
			}
			if accepted || baggage.FromContext(ctx).Member(otelsession.SignatureKey).Key() != "" {
				t.Fatalf("refused (%v), but the session or its signature is left: %v", err, got)
			}
		case accepted:
			if !maps.Equal(got, want) {
				t.Fatalf("accepted a session that was never signed:\n got %v\nwant %v", got, want)
			}
			if messageID != "" && messageID != "m-1" {
				t.Fatalf("accepted on message %q; the seeds are signed for no message and for m-1", messageID)
			}
			if age > int64(propagation.DefaultMaxAge/time.Second) || -age > int64(propagation.DefaultMaxSkew/time.Second) {
				t.Fatalf("accepted %d s after signing, outside the window", age)
			}
			if counts.Signed != 1 || counts.Accepted != 1 {
				t.Fatalf("accepted, but counts = %+v", counts)
			}
		case counts.Accepted != 0 && counts.Signed != 1:
			t.Fatalf("counts = %+v without a session", counts)
		}

		ctx2, counts2, err2 := extract()
		if (err == nil) != (err2 == nil) || counts != counts2 || !maps.Equal(got, sessionSeen(ctx2)) {
			t.Fatalf("same input, different outcomes: %v %+v, then %v %+v", err, counts, err2, counts2)
		}
	})
}
