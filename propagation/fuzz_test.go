package propagation_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// FuzzExtract feeds raw baggage header lines (the input split at "\n", one
// header line each) to Inbound.Extract with a policy that trusts the peer, so
// that only the input decides. Whatever the input:
//   - Extract does not panic;
//   - with an error, the error wraps one of the package's reasons and the
//     session is wholly Unset, its signature gone too;
//   - without one, every Set field holds a value Bind could produce (valid
//     UTF-8, no NUL, at most MaxValueBytes) and no CR or LF, local fields and
//     the working directory are Unset, and the remote fields are exactly what
//     the stock propagator extracts;
//   - the same input gives the same outcome twice;
//   - an outbound policy sends the accepted session on (a worker's
//     context) as it sends the same members in a baggage rebuilt by hand,
//     which it reads and checks afresh (checkSentOnAsChecked).
//
// Seeds: testdata/fuzz/FuzzExtract and the f.Add calls below. Run it with
//
//	go test ./propagation -run '^$' -fuzz '^FuzzExtract$' -fuzztime 20s
func FuzzExtract(f *testing.F) {
	full := sessionHeaderOf(fullTestSession)
	for _, seed := range []string{
		"",
		full,
		full + "\napp.tenant=acme",
		"session.chat_id=%00,session.platform=slack",
		"session.chat_id=a,session.chat_id=b",
		"session.chat_id=a\nsession.chat_id=b",
		"session.chat_id=a b",
		"session.chat_id=%zz",
		"session.chat_id=%FF",
		"session.thread_id=1%0D%0A2",
		"session.chat_id=a%00b",
		"session.cwd=%2Fetc",
		"session.ui_session_id=x",
		"session.async_delivery=1",
		"session.async_delivery=0",
		" session.chat_id =x",
		"Session.Chat_ID=x",
		"session.chat_id=x;p=1;q",
		"session.chat_id=" + strings.Repeat("c", 513),
		manyMembers(70, "k%d=v") + ",session.chat_id=c",
		"session.chat_id=c\n" + strings.Repeat("app.a="+strings.Repeat("%FF", 700)+"\n", 2),
		"session.chat_id=c,session.sig=v1.k1.1767225600.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"session.chat_id=c,session.sig=not-a-signature",
		"session.sig=v1.k1.1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\nsession.sig=v1.k1.1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	} {
		f.Add(seed)
	}
	// Without a verifier, a malformed signature is the only signature
	// failure.
	reasons := []error{propagation.ErrBaggageTooLarge, propagation.ErrMalformedMember,
		propagation.ErrDuplicateMember, propagation.ErrInvalidValue, propagation.ErrLocalField, propagation.ErrUnknownSessionKey,
		propagation.ErrBadSignature}

	f.Fuzz(func(t *testing.T, input string) {
		header := http.Header{"Baggage": strings.Split(input, "\n")}
		extract := func() (context.Context, propagation.Counts, error) {
			p := propagation.NewInbound(propagation.TrustAll)
			ctx, err := p.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(header), propagation.Peer{Transport: "fuzz"})
			return ctx, p.Counts(), err
		}
		ctx, counts, err := extract()
		got := sessionSeen(ctx)
		// A session comes back only with the record of its values on top,
		// which the gRPC Edge takes for "no session" when it is absent.
		if b := baggage.FromContext(ctx); propagation.HasSession(b) && !sessionstate.Atop(ctx, b) {
			t.Fatalf("a session (error %v) came back without its record on top", err)
		} else if sessionstate.Atop(ctx, b) && err != nil {
			t.Fatalf("a refused session (%v) came back with a record", err)
		}

		if err != nil {
			if !slices.ContainsFunc(reasons, func(r error) bool { return errors.Is(err, r) }) {
				t.Fatalf("error wraps none of the package's reasons: %v", err)
			}
			for f, v := range got {
				if v.state != otelsession.Unset {
					t.Fatalf("refused (%v) but %s is %v", err, f, v)
				}
			}
			if m := baggage.FromContext(ctx).Member(otelsession.AsyncDeliveryKey); m.Key() != "" {
				t.Fatalf("refused (%v) but %s is present", err, otelsession.AsyncDeliveryKey)
			}
			if counts.Rejected+counts.BadSignature != 1 || counts.Accepted != 0 {
				t.Fatalf("refused but counts = %+v", counts)
			}
			if m := baggage.FromContext(ctx).Member(otelsession.SignatureKey); m.Key() != "" {
				t.Fatalf("refused (%v) but %s is present", err, otelsession.SignatureKey)
			}
		} else {
			// The reads take an accepted session from the record the policy
			// left beside it: it must say what the baggage itself holds.
			if members := membersSeen(ctx); !maps.Equal(got, members) {
				t.Fatalf("the session's reads give %v, its baggage holds %v", got, members)
			}
			raw := sessionSeen(otelprop.Baggage{}.Extract(context.Background(), otelprop.HeaderCarrier(header)))
			for _, f := range otelsession.Fields() {
				v := got[f]
				if f.Scope() == otelsession.Local {
					if v.state != otelsession.Unset {
						t.Fatalf("local field %s is %v", f, v)
					}
					continue
				}
				want := raw[f]
				if f.Class() == otelsession.ClassDisplay && want.state == otelsession.Set {
					// A display value is cut or dropped as Bind would, not refused.
					if nv, _ := otelsession.ValidateValue(f.Spec(), want.value); nv != want.value {
						want.value = nv
						if nv == "" {
							want.state = otelsession.Cleared
						}
					}
				}
				if v != want {
					t.Fatalf("%s = %v, the stock propagator extracts %v, which the value rule makes %v", f, v, raw[f], want)
				}
				if _, verr := otelsession.ValidateValue(f.Spec(), v.value); v.state == otelsession.Set && verr != nil {
					t.Fatalf("accepted %s = %q, which Bind could not produce: %v", f, v.value, verr)
				}
				if v.state == otelsession.Set && (!utf8.ValidString(v.value) || len(v.value) > otelsession.MaxValueBytes ||
					strings.ContainsAny(v.value, "\x00\r\n")) {
					t.Fatalf("accepted %s = %q, which Bind could not produce", f, v.value)
				}
			}
			if otelsession.Cwd(ctx) != "" {
				t.Fatalf("cwd = %q", otelsession.Cwd(ctx))
			}
			if m := baggage.FromContext(ctx).Member(otelsession.AsyncDeliveryKey); m.Key() != "" && m.Value() != "0" {
				t.Fatalf("accepted %s = %q", otelsession.AsyncDeliveryKey, m.Value())
			}
			if counts.Rejected != 0 || counts.BadSignature != 0 {
				t.Fatalf("no error but counts = %+v", counts)
			}
			checkSentOnAsChecked(t, ctx)
		}

		ctx2, _, err2 := extract()
		if (err == nil) != (err2 == nil) {
			t.Fatalf("same input, different outcomes: %v, then %v", err, err2)
		}
		for f, v := range sessionSeen(ctx2) {
			if got[f] != v {
				t.Fatalf("same input, %s = %v, then %v", f, got[f], v)
			}
		}
	})
}

// checkSentOnAsChecked holds what an allowed outbound policy writes for ctx,
// the context an inbound policy returned, and what it counts, to what it
// writes and counts for the same members in a baggage rebuilt by hand,
// which no record describes: the policy skips its check of a baggage an
// inbound policy accepted, and writes its line from the record
// (acceptedSession, sessionstate.WireLine); both must change nothing.
func checkSentOnAsChecked(t *testing.T, ctx context.Context) {
	t.Helper()
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	send := func(ctx context.Context) (otelprop.MapCarrier, propagation.OutboundCounts, error) {
		o := propagation.NewOutbound(propagation.AllowAll)
		c := otelprop.MapCarrier{}
		err := o.Inject(ctx, prop, c, propagation.Dest{Transport: "fuzz", Name: "on"})
		return c, o.Counts(), err
	}
	b := baggage.FromContext(ctx)
	rebuilt, err := baggage.New(b.Members()...)
	if err != nil {
		t.Fatalf("the accepted baggage's members build no baggage: %v", err)
	}
	got, gotCounts, gotErr := send(ctx)
	want, wantCounts, wantErr := send(baggage.ContextWithBaggage(ctx, rebuilt))
	split := func(line string) []string {
		ms := strings.Split(line, ",")
		slices.Sort(ms)
		return ms
	}
	if !slices.Equal(split(got["baggage"]), split(want["baggage"])) || (gotErr == nil) != (wantErr == nil) || gotCounts != wantCounts {
		t.Fatalf("sent on, the accepted session is written %q (%+v, %v); the same members rebuilt, %q (%+v, %v)",
			got["baggage"], gotCounts, gotErr, want["baggage"], wantCounts, wantErr)
	}
}
