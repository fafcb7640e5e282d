package otelsession

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
)

// describe is everything a bound context holds of the session: every
// baggage member with its value, sorted, and the local state.
func describe(ctx context.Context) string {
	var ms []string
	for _, m := range baggage.FromContext(ctx).Members() {
		ms = append(ms, fmt.Sprintf("%s=%q (%s)", m.Key(), m.Value(), m.String()))
	}
	slices.Sort(ms)
	l := localFrom(ctx)
	if l == nil {
		l = &local{}
	}
	present, checked := checkedOf(ctx)
	// The outbound line written from the record, its members sorted.
	line, wrote := wireLine(ctx, baggage.FromContext(ctx))
	lm := strings.Split(line, ",")
	slices.Sort(lm)
	return fmt.Sprintf("%s | %q %v cwd=%q delegated=%v checked=%v,%v | line %v %s", strings.Join(ms, ","), l.vals, l.st, l.cwd, l.delegated, checked, present,
		wrote, strings.Join(lm, ","))
}

func internalMember(t *testing.T, k, v string) baggage.Member {
	t.Helper()
	m, err := baggage.NewMemberRaw(k, v)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBindCacheBindsWhatBindBuilds checks that a Bind served by the cache
// binds exactly what an uncached Bind builds, over every kind of context Bind
// treats differently: empty, holding a previous session, a signature, stray
// keys in the session namespace, members of the application, fields Bind
// leaves alone, a delegated child; and with message ids that change, are
// empty, or are refused.
func TestBindCacheBindsWhatBindBuilds(t *testing.T) {
	base := Session{
		Platform: "telegram", Source: "gateway", ChatID: "-100cache", ChatType: "group",
		ChatName: "Cache test", ThreadID: "42", UserID: "7", UserName: "Alice",
		SessionKey: "agent:main:telegram:-100cache:42", UISessionID: "tab", MessageID: "m1",
		BrowserControlPrincipal: "user:alice", Cron: CronOff, Cwd: "/srv/a",
	}
	stateless := base
	stateless.Stateless, stateless.ChatID = true, "-100stateless"
	bare := Session{Platform: "discord", ChatID: "c-bare"}

	bg := context.Background()
	prev := bindBuilt(bg, Session{Platform: "slack", ChatID: "old", MessageID: "x"}, nil)
	withBag := func(ctx context.Context, ms ...baggage.Member) context.Context {
		b := baggage.FromContext(ctx)
		for _, m := range ms {
			b, _ = b.SetMember(m)
		}
		return baggage.ContextWithBaggage(ctx, b)
	}
	contexts := map[string]context.Context{
		"empty":            bg,
		"previous session": prev,
		"signature":        withBag(prev, internalMember(t, SignatureKey, "v1.abc")),
		"stray owned key":  withBag(bg, internalMember(t, "session.future", "1"), internalMember(t, "SESSION.chat_id", "evil")),
		"foreign member":   withBag(prev, internalMember(t, "tenant", "acme")),
		"foreign members, escaped, with properties": withBag(bg, internalMember(t, "app.note", "a b,«c» 100%"), appWithProps(t)),
		"foreign members beside strays and a signature": withBag(prev, internalMember(t, "tenant", "acme"),
			internalMember(t, "session.future", "1"), internalMember(t, SignatureKey, "v1.abc")),
		"foreign members, more than the cache merges":  withBag(bg, manyMembers(t, mergeLimit+1)...),
		"foreign members, as many as the cache merges": withBag(bg, manyMembers(t, mergeLimit)...),
		"a foreign member near the byte limit":         withBag(bg, internalMember(t, "app.big", strings.Repeat("x", MaxBaggageBytes-700))),
		"a foreign member past the byte limit":         withBag(bg, internalMember(t, "app.big", strings.Repeat("x", MaxBaggageBytes-200))),
		"foreign member and cron auto-deliver":         withBag(With(prev, FieldCronAutoDeliverChatID, "c9"), internalMember(t, "tenant", "acme")),
		"foreign member, delegated child":              withBag(WithDelegatedChild(prev, "child-1"), internalMember(t, "tenant", "acme")),
		"cron auto-deliver":                            With(prev, FieldCronAutoDeliverChatID, "c9"),
		"async member":                                 DeclareStatelessChannel(prev),
		"delegated child":                              WithDelegatedChild(prev, "child-1"),
	}
	messageIDs := []string{"m1", "m2", "", "m2", "bad\x01id", "m3"}
	for name, ctx := range contexts {
		for _, s := range []Session{base, stateless, bare} {
			for _, id := range messageIDs {
				s.MessageID = id
				want := describe(bindBuilt(ctx, s, nil))
				for i := range 2 { // a miss or a hit, then surely a hit
					if got := describe(Bind(ctx, s)); got != want {
						t.Errorf("%s, %s message %q, bind %d:\n got %s\nwant %s", name, s.ChatID, id, i, got, want)
					}
				}
			}
		}
	}
	if st := BindCache(); st.Hits == 0 {
		t.Errorf("no Bind was served by the cache: %+v", st)
	}
	// A session over the application's members is merged from the cache
	// from its third Bind on: the first is built with them and noted, the
	// second binds the session alone, caches it and merges.
	s := base
	s.ChatID = "-100merged"
	before := BindCache()
	for range 4 {
		Bind(contexts["foreign member"], s)
	}
	if st := BindCache(); st.Hits-before.Hits != 2 || st.Misses-before.Misses != 2 {
		t.Errorf("four Binds over the application's member: %d hits and %d misses, want 2 and 2",
			st.Hits-before.Hits, st.Misses-before.Misses)
	}
}

// appWithProps is a member of the application's with properties, one of
// them with a value.
func appWithProps(t *testing.T) baggage.Member {
	t.Helper()
	p1, err := baggage.NewKeyProperty("sampled")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := baggage.NewKeyValuePropertyRaw("ttl", "30 s")
	if err != nil {
		t.Fatal(err)
	}
	m, err := baggage.NewMemberRaw("app.flags", "x", p1, p2)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// manyMembers returns n members of the application's.
func manyMembers(t *testing.T, n int) []baggage.Member {
	var ms []baggage.Member
	for i := range n {
		ms = append(ms, internalMember(t, fmt.Sprintf("app.k%d", i), strconv.Itoa(i)))
	}
	return ms
}

// TestBindCacheKeepsOnlyWholeSessions checks that a session Bind refuses or
// cuts is never cached (so it is reported on every Bind) and that a cached
// session's refused message id is still refused.
func TestBindCacheKeepsOnlyWholeSessions(t *testing.T) {
	refused := Session{Platform: "telegram", ChatID: "bad\x00chat"}
	cut := Session{Platform: "telegram", ChatID: "c-cut", ChatName: strings.Repeat("n", maxDisplayBytes+1)}
	for _, s := range []Session{refused, cut} {
		before := BindCache()
		Bind(context.Background(), s)
		Bind(context.Background(), s)
		if after := BindCache(); after.Hits != before.Hits {
			t.Errorf("%q was served by the cache", s.ChatID)
		}
	}
	good := Session{Platform: "telegram", ChatID: "c-good", MessageID: "1"}
	Bind(context.Background(), good)
	good.MessageID = "bad\x01"
	if v, st := Lookup(Bind(context.Background(), good), FieldChatID); st != Cleared || v != "" {
		t.Errorf("a refused message id bound the session: chat id %q %v", v, st)
	}
}

// TestBindCacheMemoryBound fills a small cache with many more distinct
// sessions as it holds, of the largest size it caches, and checks the
// entries stay bounded and the heap they hold stays within the documented
// per-entry bound.
func TestBindCacheMemoryBound(t *testing.T) {
	const n = 64
	SetBindCacheSize(n)
	defer SetBindCacheSize(defaultBindCacheSize)
	// measure binds 8n sessions mk makes, each with as many message ids as
	// messages says (a conversation's next messages, served by the cache).
	measure := func(mk func(i int) Session, messages int) float64 {
		SetBindCacheSize(n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		// Eight times as many sessions as slots: every set is all but
		// surely full, and every slot was overwritten several times.
		for i := range 8 * n {
			s := mk(i)
			for m := range messages {
				s.MessageID = strconv.Itoa(90000 + m) // a fresh string per message
				Bind(context.Background(), s)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		st := BindCache()
		if st.Capacity != n || st.Entries > n || st.Entries < n*3/4 {
			t.Fatalf("cache holds %d entries, capacity %d, after %d sessions", st.Entries, st.Capacity, 8*n)
		}
		return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(st.Entries)
	}
	typicalSession := func(i int) Session {
		s := Session{
			Platform: "telegram", Source: "gateway", ChatID: "-1001234567890", ChatType: "group",
			ChatName: "Ops — night shift", ThreadID: "17585", UserID: "5512345678", UserIDAlt: "@alice",
			UserName: "Alice Example", ScopeID: "guild-998877", SessionKey: "agent:main:telegram:group:-1001234567890:17585",
			SessionID: "20261202_152133_a1b2c3", UISessionID: "tab-7", MessageID: "88121",
			Profile: "default", BrowserControlPrincipal: "user:alice", BrowserControlTransportFamily: "cdp",
			ParentChatID: "-1001234567000", Cron: CronOff, Cwd: "/srv/work/alice",
		}
		s.ChatID = fmt.Sprintf("-100%010d", i) // a fresh string per session, as a gateway decodes
		return s
	}
	typical := measure(typicalSession, 1)
	// From the second message on, an entry holds the session's values
	// apart, which every next message's record shares: however many
	// messages came, no earlier message's state or baggage stays alive.
	conversation := measure(typicalSession, 8)
	largest := measure(func(i int) Session {
		// Identity values that fill the W3C byte limit by the cheap bound
		// (3 bytes per byte), local values and the directory at their limits.
		v := func(c byte, n int) string { return fmt.Sprintf("%03d", i) + strings.Repeat(string(c), n-3) }
		return Session{
			Platform: v('p', maxNameBytes), ChatID: v('c', MaxValueBytes), ThreadID: v('t', MaxValueBytes),
			UserID: v('u', MaxValueBytes), SessionKey: v('k', MaxValueBytes), ScopeID: v('s', 500),
			UISessionID: v('i', MaxValueBytes), BrowserControlPrincipal: v('b', MaxValueBytes),
			BrowserControlTransportFamily: v('f', maxNameBytes), Cwd: "/" + v('d', maxCwdBytes-1),
		}
	}, 1)
	t.Logf("bytes per cached entry: typical full session %.0f, after 8 messages %.0f, largest cached session %.0f", typical, conversation, largest)
	if conversation > typical+1024 {
		t.Errorf("an entry holds %.0f B after 8 messages, %.0f B after one: more than 1 KiB over it: an earlier message's state or baggage is kept alive", conversation, typical)
	}
	if typical > 5*1024 || largest > 13*1024 {
		t.Errorf("an entry holds %.0f B (typical) and %.0f B (largest); the bounds are 5 KiB (3.1 KiB without the race detector) and 13 KiB", typical, largest)
	}
}

// TestFieldByEnvMatchesTheTable checks Getenv's name table against the
// field table, and that names that are not fields (prefixes, other cases,
// the empty name) find nothing.
func TestFieldByEnvMatchesTheTable(t *testing.T) {
	for _, s := range table {
		if s.Field == 0 {
			continue
		}
		if got := fieldByEnv(s.Env); got != s.Field {
			t.Errorf("fieldByEnv(%q) = %v, want %v", s.Env, got, s.Field)
		}
		// A name built at run time (not the table's own string) and a
		// prefix of it (the same bytes, shorter) are told apart by their
		// bytes, not where they are.
		if got := fieldByEnv(strings.Clone(s.Env)); got != s.Field {
			t.Errorf("fieldByEnv of a copy of %q = %v, want %v", s.Env, got, s.Field)
		}
		for _, not := range []string{strings.ToLower(s.Env), s.Env[:len(s.Env)-1], s.Env + "_", "X" + s.Env[1:]} {
			if got := fieldByEnv(not); got != 0 {
				t.Errorf("fieldByEnv(%q) = %v, want none", not, got)
			}
		}
	}
	for _, not := range []string{"", "H", "HOME", "PATH", "HERMES_"} {
		if got := fieldByEnv(not); got != 0 {
			t.Errorf("fieldByEnv(%q) = %v, want none", not, got)
		}
	}
}

// TestCheckedBaggage checks the record outbound policies rely on: a context
// Bind built is known to be checked, without allocating, until any code
// replaces its baggage; a writer that keeps members it did not check does
// not claim it.
func TestCheckedBaggage(t *testing.T) {
	ctx := Bind(context.Background(), Session{Platform: "telegram", ChatID: "c-checked"})
	if present, ok := checkedOf(ctx); !ok || !present {
		t.Fatalf("a bound context: checked %v, present %v", ok, present)
	}
	if n := testing.AllocsPerRun(100, func() { checkedOf(ctx) }); n != 0 {
		t.Errorf("checkedBaggage allocates %.1f times", n)
	}
	b, _ := baggage.FromContext(ctx).SetMember(internalMember(t, "tenant", "acme"))
	if _, ok := checkedOf(baggage.ContextWithBaggage(ctx, b)); ok {
		t.Error("a baggage replaced after Bind is still claimed checked")
	}
	if present, ok := checkedOf(With(ctx, FieldCronAutoDeliverChatID, "x")); !ok || !present {
		t.Errorf("With over a checked session, all of it checked: checked %v, present %v", ok, present)
	}
	bad, _ := baggage.FromContext(ctx).SetMember(internalMember(t, "session.thread_id", "1\n2"))
	if _, ok := checkedOf(With(baggage.ContextWithBaggage(ctx, bad), FieldCronAutoDeliverChatID, "x")); ok {
		t.Error("With kept a member nobody checked, and claims the baggage checked")
	}
	if present, ok := checkedOf(Reset(baggage.ContextWithBaggage(ctx, b))); !ok || present {
		t.Errorf("Reset over a member of the application: checked %v, present %v", ok, present)
	}
	if sessionstate.BaggageID(b) == 0 {
		t.Error("baggage.Baggage is no longer a single map: the outbound fast path is off")
	}
}

// checkedOf is checkedBaggage of ctx's own baggage.
func checkedOf(ctx context.Context) (present, ok bool) {
	return checkedBaggage(ctx, baggage.FromContext(ctx))
}
