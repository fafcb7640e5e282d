package propagation

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/internal/stockprop"
)

// TestInboundCacheMatchesMembersExactly gives lookup lines whose key hash
// is forced to an entry's (as a collision would): only a line with the
// entry's members, each once, in any order, but for the message id's
// value, may be served from it.
func TestInboundCacheMatchesMembersExactly(t *testing.T) {
	c := newInboundCache(4)
	keyOf := func(line string) *lineKey {
		t.Helper()
		w := new(writtenMembers)
		seen, err := scanSessionKeys([]string{line}, w)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		k := new(lineKey)
		if !c.keyOf(k, line, seen, w, false) {
			t.Fatalf("%q may not be cached", line)
		}
		k.h = 42
		return k
	}
	const line = "app.a=1,session.chat_id=c,session.message_id=17,app.b=2"
	b, err := baggage.Parse(line)
	if err != nil {
		t.Fatal(err)
	}
	r := sessionstate.Record{B: b}
	c.remember(keyOf(line), b, &r, new(signedValues)) // seen once: noted
	if c.lookup(keyOf(line)) != nil {
		t.Fatal("a line seen once made an entry")
	}
	c.remember(keyOf(line), b, &r, new(signedValues))
	for _, served := range []string{
		line,
		"app.a=1,session.chat_id=c,session.message_id=1234,app.b=2",
		"app.b=2,session.message_id=9,app.a=1,session.chat_id=c",
	} {
		if c.lookup(keyOf(served)) == nil {
			t.Errorf("%q is not served from the entry of %q", served, line)
		}
	}
	for _, other := range []string{
		"app.a=1,session.chat_id=d,session.message_id=17,app.b=2",
		"app.a=1,session.chat_id=c,session.message_id=17,app.b=3",
		"app.a=1,session.chat_id=c,session.message_id=17",
		"app.a=1,session.chat_id=c,session.message_id=17,app.b=2,app.c=3",
		"app.a=1,session.chat_id=c,session.message_id=17,app.a=1",
		"app.a=1,session.chat_id=c,app.b=2,app.c=3",
		"app.a=1,session.chat_id=c,app.b=2",
		"app.a=1,session.chat_id=c,session.message_id=17,app.b=2 ",
		"app.a=1,session.chat_id=c,session.message_id=17,,app.b=2",
	} {
		if c.lookup(keyOf(other)) != nil {
			t.Errorf("%q is served from the entry of %q", other, line)
		}
	}
}

// TestInboundCacheMemoryBound measures what an entry keeps alive: the
// line's members, the baggage OpenTelemetry parsed from it and the record,
// with nothing of the messages it served (their contexts are dropped). The
// package note on the cache quotes these figures.
func TestInboundCacheMemoryBound(t *testing.T) {
	const n = 64
	// measure extracts three messages of each of 8n conversations (noted,
	// entry made, served), the lines of message m of conversation i being
	// lines(i)[m], each a fresh string as a transport reads it.
	measure := func(lines func(i int) [3]string) (perEntry float64, entries int) {
		p := NewInbound(TrustAll, WithCacheSize(n))
		all := make([][3]string, 8*n)
		for i := range all {
			all[i] = lines(i)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, ls := range all {
			for _, l := range ls {
				if _, err := p.Extract(context.Background(), otelprop.Baggage{}, otelprop.MapCarrier{"baggage": l}, Peer{Transport: "test"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(all)
		for i := range p.cache.slots {
			if p.cache.slots[i].Load() != nil {
				entries++
			}
		}
		if c := p.Counts(); c.Cached != uint64(len(all)) {
			t.Fatalf("%d of %d third messages served from the cache", c.Cached, len(all))
		}
		if entries < n*3/4 || entries > n {
			t.Fatalf("the cache holds %d entries, capacity %d", entries, n)
		}
		return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(entries), entries
	}
	bound := func(mk func(i int) otelsession.Session) func(i int) [3]string {
		return func(i int) (ls [3]string) {
			s := mk(i)
			for m := range ls {
				s.MessageID = strconv.Itoa(90000 + m)
				c := otelprop.MapCarrier{}
				otelprop.Baggage{}.Inject(otelsession.Bind(context.Background(), s), c)
				ls[m] = c["baggage"]
			}
			return ls
		}
	}
	typicalSession := func(i int) otelsession.Session {
		return otelsession.Session{
			Platform: "telegram", Source: "gateway", ChatID: fmt.Sprintf("-100%010d", i), ChatType: "group",
			ChatName: "Ops — night shift", ThreadID: "17585", UserID: "5512345678", UserIDAlt: "@alice",
			UserName: "Alice Example", ScopeID: "guild-998877", SessionKey: "agent:main:telegram:group:-1001234567890:17585",
			SessionID: "20261202_152133_a1b2c3", Profile: "default", ParentChatID: "-1001234567000", Cron: otelsession.CronOff,
		}
	}
	typical, _ := measure(bound(typicalSession))
	// A line at OpenTelemetry's limits: the session, then the
	// application's members up to 64 members and 8,192 bytes.
	largest, _ := measure(func(i int) (ls [3]string) {
		base := bound(typicalSession)(i)
		for m := range ls {
			var b strings.Builder
			b.WriteString(base[m])
			members := strings.Count(base[m], ",") + 1
			for j := 0; members < otelsession.MaxBaggageMembers; j++ {
				// 64 bytes spare: the decoded and encoded size is bounded from
				// above by more than the line (growthBound).
				room := otelsession.MaxBaggageBytes - 64 - b.Len() - (otelsession.MaxBaggageMembers-members)*12
				v := min(room, 300)
				fmt.Fprintf(&b, ",app.m%02d=%s", j, strings.Repeat("v", max(v, 1)))
				members++
			}
			ls[m] = b.String()
			if len(ls[m]) > otelsession.MaxBaggageBytes {
				t.Fatalf("the test's line is %d bytes", len(ls[m]))
			}
		}
		return ls
	})
	t.Logf("bytes per entry: typical full session %.0f, a line at the W3C limits %.0f", typical, largest)
	if typical > 5*1024 || largest > 16*1024 {
		t.Errorf("an entry keeps %.0f B (typical) and %.0f B (largest) alive: more than the 5 KiB and 16 KiB the package note allows", typical, largest)
	}
}

// TestQuietLineCacheMemoryBound measures what an entry of the cache of
// lines that name no session keeps alive: its copy of the line and the
// baggage built from it, for the application's three members and for a
// line at OpenTelemetry's limits (64 members, 8 KiB), as the package note
// says.
func TestQuietLineCacheMemoryBound(t *testing.T) {
	const n = defaultInboundCacheSize
	measure := func(line func(i int) string) (perEntry float64) {
		p := NewInbound(TrustNone)
		all := make([]string, 8*n)
		for i := range all {
			all[i] = line(i)
			if !stockprop.NamesNoSession(all[i]) {
				t.Fatalf("the test's line %.40q names a session", all[i])
			}
		}
		for _, l := range all {
			for range 3 { // noted, entry made, served
				// Each a fresh string, as a transport reads it: the entry
				// must keep its own copy, not the carrier's.
				c := otelprop.MapCarrier{"baggage": strings.Clone(l)}
				if _, err := p.Extract(context.Background(), otelprop.Baggage{}, c, Peer{Transport: "test"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// What the entries keep alive: the heap with them, less the heap
		// once they are gone, each after two collections (a sync.Pool's
		// objects outlive the first).
		var with, without runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&with)
		entries := 0
		for i := range p.cache.quiet.slots {
			if p.cache.quiet.slots[i].Load() != nil {
				entries++
			}
		}
		if c := p.Counts(); c.CachedNoSession < uint64(len(all))/2 {
			t.Fatalf("%d of %d third lines served from the cache", c.CachedNoSession, len(all))
		}
		if capacity := len(p.cache.quiet.slots); capacity != n/4 || entries < capacity*3/4 {
			t.Fatalf("the cache holds %d lines without a session, capacity %d", entries, capacity)
		}
		for i := range p.cache.quiet.slots {
			p.cache.quiet.slots[i].Store(nil)
		}
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&without)
		runtime.KeepAlive(all)
		runtime.KeepAlive(p)
		return float64(int64(with.HeapAlloc)-int64(without.HeapAlloc)) / float64(entries)
	}
	typical := measure(func(i int) string { return fmt.Sprintf("app.tenant=t-%05d,app.plan=pro,app.region=eu-west-1", i) })
	largest := measure(func(i int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "app.id=%05d", i)
		for j := 1; j < otelsession.MaxBaggageMembers; j++ {
			room := otelsession.MaxBaggageBytes - b.Len() - (otelsession.MaxBaggageMembers-j)*12
			fmt.Fprintf(&b, ",app.m%02d=%s", j, strings.Repeat("v", max(min(room, 300), 1)))
		}
		if b.Len() > otelsession.MaxBaggageBytes {
			t.Fatalf("the test's line is %d bytes", b.Len())
		}
		return b.String()
	})
	t.Logf("bytes per line without a session: the application's three members %.0f, a line at the W3C limits %.0f", typical, largest)
	if typical > 1.5*1024 || largest > 20*1024 {
		t.Errorf("an entry keeps %.0f B (three members) and %.0f B (largest) alive: more than the 1.5 KiB and 20 KiB the package note allows", typical, largest)
	}
}
