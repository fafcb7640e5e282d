package propagation

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/internal/stockprop"
)

// FuzzCheckReadsTheLineAsTheParserDoes holds the check that reads plain
// values from the raw line (Inbound.Extract's path for one line that only
// the W3C propagator parsed) to the check that looks every member up in the
// extracted baggage: for any line, and over a context that already holds
// baggage of its own (what the propagator keeps when the line parses to
// nothing), both reach the same verdict, the same values and the same
// errors. A line that Inbound.Extract returns as extracted, without either
// check (stockprop.NamesNoSession: within the size limit and not
// mention.Mentioned), must be one both would pass with no session present.
//
//	go test ./propagation -run '^$' -fuzz '^FuzzCheckReadsTheLineAsTheParserDoes$' -fuzztime 20s
func FuzzCheckReadsTheLineAsTheParserDoes(f *testing.F) {
	full := otelprop.MapCarrier{}
	otelprop.Baggage{}.Inject(otelsession.Bind(context.Background(), otelsession.Session{
		Platform: "telegram", ChatID: "-100123", ChatName: "Ops – EU", ThreadID: "17585", UserID: "u-42",
		UserName: "Ana Lúcia", SessionKey: "agent:main:telegram:-100123:17585", MessageID: "88121",
	}), full)
	for _, seed := range []string{
		full["baggage"],
		full["baggage"] + ",app.tenant=acme",
		"app.tenant=acme," + full["baggage"],
		"session.chat_id=a,session.platform=slack",
		"session.chat_id= a\t,session.platform=slack ",
		"session.chat_id=a b",
		"session.chat_id=\"a\"",
		"session.chat_id=a\\b",
		"session.chat_id=a;p=1",
		"session.chat_id=a%20b",
		"session.chat_id=%zz,session.platform=slack",
		"session.chat_id=",
		"session.chat_id",
		"session.chat_id=a,session.chat_id=b",
		"session.chat_id=" + strings.Repeat("c", 513),
		"session.chat_name=" + strings.Repeat("c", 600),
		"session.async_delivery=0,session.chat_id=a",
		"session.async_delivery=1",
		"session.chat_id=a,session.sig=v1.k1.1767225600.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"app.a=" + strings.Repeat("%FF", 2700) + ",session.chat_id=a",
		"app.a=" + strings.Repeat("%FF", 1000) + ",session.chat_id=a,app.b=" + strings.Repeat("%FF", 1000) + ",session.platform=slack",
		"k=%zz,session.chat_id=a",
		"session.ui_session_id=x,session.chat_id=a",
		"session.bogus=x,session.chat_id=a",
		// Lines that name no session key the scan can see.
		"app.tenant=t-42,app.plan=pro,app.region=eu-west-1",
		"app.a=1;session.chat_id=a",
		"session.chat_id;p=1",
		"Session.Chat_ID=a",
		"\vsession.chat_id=a",
		"app.a=%zz",
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	parent, _ := baggage.Parse("app.x=1,app.y=2")
	f.Fuzz(func(t *testing.T, line string, withParent bool) {
		ctx := context.Background()
		if withParent {
			ctx = baggage.ContextWithBaggage(ctx, parent)
		}
		b := baggage.FromContext(otelprop.Baggage{}.Extract(ctx, otelprop.MapCarrier{"baggage": line}))
		var written writtenMembers
		seen, err := scanSessionKeys([]string{line}, &written)
		seenSlow, errSlow := scanSessionKeys([]string{line}, nil)
		if seen != seenSlow || fmt.Sprint(err) != fmt.Sprint(errSlow) {
			t.Fatalf("the scan differs when it records the line: %b %v, %b %v", seen, err, seenSlow, errSlow)
		}
		if stockprop.NamesNoSession(line) {
			// Inbound.Extract returns it unchecked, and consults no peer: the
			// check would find no session to trust, no signature to verify,
			// no error to report (the gRPC transport does not describe its
			// caller for such a line, stockprop.NoSession).
			var in inboundSession
			if errCheck := in.check(b, seen, false, nil); err != nil || seen != 0 || errCheck != nil || in.present {
				t.Fatalf("line %q names no session, and Inbound.Extract returns it unchecked, but the scan finds %b, %v and the check %v, a session: %v",
					line, seen, err, errCheck, in.present)
			}
		}
		if err != nil {
			return // Inbound.Extract refuses it before any check
		}
		var fast, slow inboundSession
		errFast := fast.check(b, seen, false, &written)
		errSlow = slow.check(b, seen, false, nil)
		if fmt.Sprint(errFast) != fmt.Sprint(errSlow) {
			t.Fatalf("line %q: reading the line: %v; looking members up: %v", line, errFast, errSlow)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("line %q: reading the line: %+v; looking members up: %+v", line, fast, slow)
		}
	})
}

// TestClassifyFindsEveryKeyByHash holds the raw scan's table look-up to the
// wire-key table: every key is found, by a hash that separates them all, and
// nothing else is.
func TestClassifyFindsEveryKeyByHash(t *testing.T) {
	if keyHashMul == 0 {
		t.Fatal("no multiplier separates the session keys: classify compares keys one by one; extend keyHash")
	}
	for _, s := range otelsession.Specs() {
		c := classify(s.Key)
		if c == nil || c.spec.Key != s.Key {
			t.Fatalf("classify(%q) = %v", s.Key, c)
		}
		for _, other := range []string{s.Key + "x", s.Key[:len(s.Key)-1], strings.ToUpper(s.Key), "x" + s.Key[1:]} {
			if c := classify(other); c != nil {
				t.Fatalf("classify(%q) = %q", other, c.spec.Key)
			}
		}
	}
	for _, k := range []string{"", "session.", "session", "app.tenant", "session.chat_namf", "session.chat_typf"} {
		if c := classify(k); c != nil {
			t.Fatalf("classify(%q) = %q", k, c.spec.Key)
		}
	}
}

// TestHasSessionReadsAsItLooksUp holds hasSession's two ways of answering
// to each other: reading every member of a small baggage, and looking every
// session key up in a large one, for each key of the schema, strays and
// near-misses of the session namespace, and baggages of every size around
// smallBaggage.
func TestHasSessionReadsAsItLooksUp(t *testing.T) {
	session := map[string]bool{otelsession.AsyncDeliveryKey: true, otelsession.SignatureKey: true}
	keys := []string{otelsession.AsyncDeliveryKey, otelsession.SignatureKey,
		"session.bogus", "Session.chat_id", "session.chat_idx", "session.", "sessionx.chat_id", "app.session.chat_id"}
	for _, f := range otelsession.Fields() {
		session[f.Key()] = true
		keys = append(keys, f.Key(), strings.ToUpper(f.Key()))
	}
	member := func(k string) baggage.Member {
		m, err := baggage.NewMemberRaw(k, "v")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, key := range keys {
		for size := 1; size <= 2*smallBaggage+1; size++ {
			ms := []baggage.Member{member(key)}
			for i := 1; i < size; i++ {
				ms = append(ms, member(fmt.Sprintf("app.k%d", i)))
			}
			b, err := baggage.New(ms...)
			if err != nil {
				t.Fatal(err)
			}
			byMember, byKey := hasSessionMember(b), hasSessionKey(b)
			if byMember != byKey {
				t.Fatalf("%q among %d members: reading the members says %v, looking the keys up %v", key, size, byMember, byKey)
			}
			if hasSession(b) != byKey {
				t.Fatalf("%q among %d members: hasSession says %v, looking the keys up %v", key, size, hasSession(b), byKey)
			}
			if byKey != session[key] {
				t.Fatalf("%q among %d members: hasSession says %v", key, size, byKey)
			}
		}
	}
}

// BenchmarkHasSession measures hasSession's two ways on baggages without a
// session, the answer that costs the most: smallBaggage is where reading the
// members stops being cheaper than 27 look-ups.
func BenchmarkHasSession(b *testing.B) {
	for _, n := range []int{1, 2, 4, 6, 8} {
		var ms []baggage.Member
		for i := range n {
			m, err := baggage.NewMemberRaw(fmt.Sprintf("app.key%d", i), fmt.Sprintf("value-%d", i))
			if err != nil {
				b.Fatal(err)
			}
			ms = append(ms, m)
		}
		bag, err := baggage.New(ms...)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("members=%d/read_members", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkHas = hasSessionMember(bag)
			}
		})
		b.Run(fmt.Sprintf("members=%d/look_up_keys", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkHas = hasSessionKey(bag)
			}
		})
	}
}

var sinkHas bool

// The parser's size error is found, so a line it truncated is refused
// (checkReencodedSize); were it not, every such line would pass.
func TestTheParsersSizeErrorIsKnown(t *testing.T) {
	if otelTooLarge == nil {
		t.Fatal("baggage.Parse no longer wraps an error for a string over the limit")
	}
	_, err := baggage.Parse("a=" + strings.Repeat("%FF", 3000))
	if !errors.Is(err, otelTooLarge) {
		t.Fatalf("a truncated parse returned %v, not the size error %v", err, otelTooLarge)
	}
}
