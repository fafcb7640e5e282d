package otelsession

import (
	"context"
	"hash/maphash"
	"sync/atomic"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
)

// The bind cache: a gateway binds the same conversation's session on every
// message, and baggage values are immutable, so the baggage and the local
// state a Bind built can be handed to the next Bind of the same session
// instead of being validated, encoded and hashed again.
//
// An entry is keyed by the whole Session except its MessageID (the reply
// anchor changes on every message of a conversation, the rest does not). It
// holds the last baggage built for it and the local state beside it; a Bind with another message id derives its baggage from that one with a
// single SetMember, which OpenTelemetry does as one map copy instead of the
// re-encoding of every member that baggage.New does.
//
// Only sessions Bind accepts whole are cached: no refused value, no display
// value cut or dropped (those are reported on every Bind, and an over-long
// value must not be kept alive by the cache), and members that fit the W3C
// limits by the cheap bound. So every cached string is within its key's
// limit, and an entry holds at most what one valid session holds. A context
// whose baggage holds members of the application's, at most mergeLimit of
// them, is bound from the cache with those members merged into the cached
// baggage (merge; its first Bind binds the session alone, then merges); a
// context with more, or with fields Bind leaves alone (the cron fields),
// is bound without the cache.
//
// Memory: at most the cache's capacity in entries (512 by default, see
// [SetBindCacheSize]). An entry holds about 3.1 KiB for a full session of
// typical values and at most about 11.3 KiB for the largest session the
// cache keeps (values filling the W3C byte limit, a 4 KiB working
// directory), as TestBindCacheMemoryBound measures: about 1.6 MiB typical,
// 5.7 MiB at worst by default. From a conversation's second message on, an
// entry holds about 0.6 KiB more (3.7 KiB typical, 1.9 MiB for 512): the
// session's values, kept apart for the next messages' records to share
// instead of each copying them. The cache is 4-way set associative; a new
// session takes a free slot of its set or evicts one of the four.

// BindCacheStats is a snapshot of the bind cache's counters.
type BindCacheStats struct {
	// Hits counts Binds served from the cache (the same session, perhaps
	// with another message id, perhaps merged with the application's
	// members); Misses counts Binds that built their session (a first time,
	// a session the cache does not keep, or a context with baggage members
	// the cache does not merge).
	Hits, Misses uint64
	// Entries is the number of sessions held; Capacity the most it holds.
	Entries, Capacity int
}

// BindCache returns the bind cache's counters since the process started.
func BindCache() BindCacheStats {
	st := BindCacheStats{Hits: bindHits.Load(), Misses: bindMisses.Load()}
	if t := bindTab.Load(); t != nil {
		st.Capacity = len(t.slots)
		for i := range t.slots {
			if t.slots[i].Load() != nil {
				st.Entries++
			}
		}
	}
	return st
}

// SetBindCacheSize bounds the bind cache to about n sessions (rounded up to
// a power of two, at least 4; n <= 0 disables the cache) and empties it. The
// default, 512, holds the active conversations of a busy gateway in about
// 1.6 MiB; a process that binds many more distinct sessions in turn can
// raise it. It is meant for start-up and tests.
func SetBindCacheSize(n int) {
	if n <= 0 {
		bindTab.Store(nil)
		return
	}
	sets := 1
	for sets*bindWays < n {
		sets *= 2
	}
	bindTab.Store(&bindTable{mask: uint64(sets - 1), slots: make([]atomic.Pointer[bindEntry], sets*bindWays),
		seen: make([]atomic.Uint64, sets*bindWays)})
}

const (
	// defaultBindCacheSize is the default bound of the bind cache.
	defaultBindCacheSize = 512
	// bindWays is the cache's associativity: a session may sit in any of the
	// bindWays slots of its set, so a few conversations whose hashes share a
	// set do not evict each other on every message.
	bindWays = 4
)

// bindTable is the cache: a set-associative array of entries, read and
// written without a lock (an entry is immutable but for its last baggage,
// an atomic pointer). A new entry takes an empty slot of its set or evicts
// one chosen by its hash.
type bindTable struct {
	mask  uint64
	slots []atomic.Pointer[bindEntry]
	// seen notes the hashes of sessions bound over the application's
	// members without an entry, one per slot: the second such Bind of a
	// session makes its entry (seenBefore).
	seen []atomic.Uint64
}

// seenBefore reports whether the session of hash h was noted before, and
// notes it if not. A note may be overwritten by another session's: that
// session's next Bind is then noted again, at no cost but the Bind's.
func (t *bindTable) seenBefore(h uint64) bool {
	slot := &t.seen[(h>>32)&uint64(len(t.seen)-1)]
	if slot.Load() == h {
		return true
	}
	slot.Store(h)
	return false
}

var (
	bindTab              atomic.Pointer[bindTable] // nil: disabled
	bindSeed             = maphash.MakeSeed()
	bindHits, bindMisses atomic.Uint64
)

func init() { SetBindCacheSize(defaultBindCacheSize) }

// set returns the slots of the set of hash h.
func (t *bindTable) set(h uint64) []atomic.Pointer[bindEntry] {
	i := (h & t.mask) * bindWays
	return t.slots[i : i+bindWays]
}

// sessionHash hashes the cache's key of s (the session without its message
// id). Equal keys hash equal; a collision costs a miss, never a wrong bind,
// as entries are compared whole.
func sessionHash(s *Session) uint64 {
	var h maphash.Hash
	h.SetSeed(bindSeed)
	for _, v := range [...]string{
		s.Platform, s.Source, s.ChatID, s.ChatType, s.ChatName, s.ThreadID, s.UserID, s.UserIDAlt,
		s.UserName, s.ScopeID, s.SessionKey, s.SessionID, s.UISessionID, s.Profile,
		s.BrowserControlPrincipal, s.BrowserControlTransportFamily, s.ParentChatID, s.Cwd,
	} {
		h.WriteString(v)
		h.WriteByte(0)
	}
	flags := byte(s.Cron)
	if s.Stateless {
		flags |= 0x80
	}
	h.WriteByte(flags)
	return h.Sum64()
}

// sameKey reports whether a and b are one key: equal but for the message id.
func sameKey(a, b *Session) bool {
	return a.Platform == b.Platform && a.Source == b.Source && a.ChatID == b.ChatID &&
		a.ChatType == b.ChatType && a.ChatName == b.ChatName && a.ThreadID == b.ThreadID &&
		a.UserID == b.UserID && a.UserIDAlt == b.UserIDAlt && a.UserName == b.UserName &&
		a.ScopeID == b.ScopeID && a.SessionKey == b.SessionKey && a.SessionID == b.SessionID &&
		a.UISessionID == b.UISessionID && a.Profile == b.Profile &&
		a.BrowserControlPrincipal == b.BrowserControlPrincipal &&
		a.BrowserControlTransportFamily == b.BrowserControlTransportFamily &&
		a.ParentChatID == b.ParentChatID && a.Cron == b.Cron && a.Cwd == b.Cwd && a.Stateless == b.Stateless
}

// bindEntry is one cached session.
type bindEntry struct {
	// key is the session, its message id aside; h is its hash.
	key Session
	h   uint64
	// bound is the cheap upper bound of the encoded session members without
	// the message id (see fit).
	bound int
	// last is the baggage built for the most recent message id.
	last atomic.Pointer[builtBaggage]
	// vals holds the session's values, which the records of every message
	// after the first share (sessionstate.Derive): made from the first
	// message's record when the second comes, so that the first message's
	// state and baggage are not kept alive by it.
	vals atomic.Pointer[sessionstate.Values]
}

// builtBaggage is a session's baggage for one message id, and the local
// state bound beside it over a context that is not a delegated child, which
// records the baggage as checked. Both are shared by every context bound
// from it (a *local in a context is never modified).
type builtBaggage struct {
	msgID string
	b     baggage.Baggage
	loc   *local
}

// builtOwn is a builtBaggage whose local state is its own: one allocation
// for both, where a Bind of the next message derives the state.
type builtOwn struct {
	builtBaggage
	own local // where loc points
}

// bindCached binds s from the cache; ok is false when it cannot (not cached,
// a message id Bind would refuse, or baggage in ctx that the cache does not
// merge).
func bindCached(ctx context.Context, s *Session, h uint64, k *keptMembers) (context.Context, bool) {
	ent := cachedEntry(s, h)
	if ent == nil {
		return ctx, false
	}
	var app []baggage.Member
	if old := baggage.FromContext(ctx); old.Len() > 0 {
		var ok bool
		if app, ok = k.of(old); !ok {
			// Bind keeps members the cache does not merge (fields it leaves
			// alone, or more of the application's than mergeLimit): it
			// builds the session again, exactly as without the cache.
			return ctx, false
		}
	}
	out, ok := bindFrom(ctx, ent, s, app)
	if ok {
		bindHits.Add(1)
	}
	return out, ok
}

// cachedEntry returns the entry of s, whose hash is h, nil when the cache
// holds none.
func cachedEntry(s *Session, h uint64) *bindEntry {
	t := bindTab.Load()
	if t == nil {
		return nil
	}
	for i, set := 0, t.set(h); i < bindWays; i++ {
		if e := set[i].Load(); e != nil && e.h == h && sameKey(&e.key, s) {
			return e
		}
	}
	return nil
}

// bindFrom binds s into ctx from its entry, merged with app, the members
// of the application's that ctx holds and Bind keeps (bindKeeps).
func bindFrom(ctx context.Context, ent *bindEntry, s *Session, app []baggage.Member) (context.Context, bool) {
	built, ok := ent.baggage(s.MessageID)
	if !ok {
		return ctx, false
	}
	b, loc := built.b, built.loc
	if len(app) > 0 {
		if b, loc, ok = ent.merge(built, app); !ok {
			return ctx, false
		}
	}
	if old := localFrom(ctx); old != nil && old.delegated {
		l := *loc
		l.delegated = true
		loc = &l
	}
	// Every baggage the cache hands out is noted here, a new message id's
	// too: the hint that b has a record may have been overwritten since b
	// was built.
	sessionstate.Recorded(b)
	return withLocal(baggage.ContextWithBaggage(ctx, b), loc), true
}

// baggage returns the entry's baggage with message id msgID.
func (ent *bindEntry) baggage(msgID string) (*builtBaggage, bool) {
	last := ent.last.Load()
	if last.msgID == msgID {
		return last, true
	}
	v := msgID
	if v == "" {
		v = ClearedValue
	} else if _, err := ValidateValue(table[FieldMessageID-1], v); err != nil {
		return nil, false // Bind reports it
	}
	key := fieldKeys[FieldMessageID-1]
	if ent.bound+len(key)+2+3*len(v) > MaxBaggageBytes {
		return nil, false // Bind checks the exact size
	}
	m, err := baggage.NewMemberRaw(key, v)
	if err != nil {
		return nil, false
	}
	// SetMember replaces the previous message id's member.
	b, err := last.b.SetMember(m)
	if err != nil {
		return nil, false
	}
	vals := ent.vals.Load()
	if vals == nil {
		// Two Binds may both get here: each stores values equal but for the
		// message id, which every record derived from them holds apart.
		vals = new(sessionstate.Values)
		last.loc.rec.CopyTo(vals)
		ent.vals.Store(vals)
	}
	next := &builtOwn{builtBaggage: builtBaggage{msgID: msgID, b: b}, own: *last.loc}
	next.own.rec = sessionstate.Derive(b, vals, int(FieldMessageID)-1, v)
	next.loc = &next.own
	ent.last.Store(&next.builtBaggage)
	return &next.builtBaggage, true
}

// keptMembers is bindKeeps of the context's baggage, read at most once per
// Bind: by the cache's look-up when it finds the session, else by
// bindBuilt when it may merge (the zero value has read nothing).
type keptMembers struct {
	app         []baggage.Member
	ok, didRead bool
}

func (k *keptMembers) of(old baggage.Baggage) ([]baggage.Member, bool) {
	if !k.didRead {
		k.app, k.ok = bindKeeps(old)
		k.didRead = true
	}
	return k.app, k.ok
}

// mergeLimit is the most members of the application's a cached session is
// merged with: each costs OpenTelemetry a copy of the baggage's map
// (Baggage.SetMember). Bind without the cache builds the whole baggage
// once (baggage.New), which costs about as much as three copies
// (BenchmarkBind's rows over the application's members): a context with
// more is bound without the cache.
const mergeLimit = 2

// bindKeeps returns the members of old that Bind keeps beside the session,
// the application's, and true, when there are at most mergeLimit and Bind
// keeps no other: every other member is a session member Bind replaces or
// a stray in the session namespace it drops, none a field Bind leaves
// alone (the cron auto-deliver fields), whose value the cached state does
// not hold. Otherwise it returns false.
func bindKeeps(old baggage.Baggage) ([]baggage.Member, bool) {
	var app []baggage.Member
	ms := old.Members()
	for i := range ms {
		m := ms[i]
		k := m.Key()
		if !OwnedKey(k) {
			if len(app) == mergeLimit {
				return nil, false
			}
			if app == nil {
				// In place: app never holds more than ms has been read.
				app = ms[:0]
			}
			app = append(app, m)
			continue
		}
		if s := specByKey[k]; s != nil && s.Field != 0 && !s.InSession {
			return nil, false
		}
	}
	return app, true
}

// merge returns the baggage of built, the entry's session for one message
// id, with the application's members app added, and the local state that
// records it: the session's record (its values shared with built's) over
// the new map, and app's keys noted for the outbound line (wireLine). ok
// is false when the whole may not fit the W3C limits: Bind then builds it,
// dropping members as it must and reporting it. The result equals what
// Bind builds without the cache (TestBindCacheBindsWhatBindBuilds): the
// session's members as the entry holds them, then the application's as
// the context held them, properties included.
func (ent *bindEntry) merge(built *builtBaggage, app []baggage.Member) (baggage.Baggage, *local, bool) {
	n, size := built.b.Len()+len(app), ent.bound+len(fieldKeys[FieldMessageID-1])+2+3*len(built.msgID)+len(app)
	if built.msgID == "" {
		size += 3 * len(ClearedValue)
	}
	for i := range app {
		if len(app[i].Properties()) > 0 {
			size += len(app[i].String())
		} else {
			size += len(app[i].Key()) + 1 + 3*len(app[i].Value())
		}
	}
	if n > MaxBaggageMembers || size > MaxBaggageBytes {
		return baggage.Baggage{}, nil, false
	}
	b := built.b
	for _, m := range app {
		var err error
		if b, err = b.SetMember(m); err != nil {
			return baggage.Baggage{}, nil, false
		}
	}
	if b.Len() != n {
		// A key twice: not what Bind would build from distinct keys.
		return baggage.Baggage{}, nil, false
	}
	la := new(localApp)
	la.local = *built.loc
	la.rec.B = b
	for i, m := range app {
		la.keys[i] = m.Key()
	}
	la.setAppKeys(la.keys[:len(app)])
	return b, &la.local, true
}

// localApp is a local state and the keys of the application's members its
// record's baggage holds, allocated together by merge.
type localApp struct {
	local
	keys [mergeLimit]string
}

// editBound returns the number of members the edit e of a Bind sets, the
// cheap bound of fit on their encoded size but for the message id's, and
// whether the whole, the message id's included, is within the W3C byte
// limit by that bound.
func editBound(e *edit) (n, bound int, fits bool) {
	for _, f := range remoteFields {
		if e.op[f-1] == opSet {
			n++
			if f != FieldMessageID {
				v := e.val[f-1]
				if v == "" {
					v = ClearedValue
				}
				bound += len(fieldKeys[f-1]) + 2 + 3*len(v)
			}
		}
	}
	if e.async == opSet {
		n++
		bound += len(AsyncDeliveryKey) + 2 + 3
	}
	msg := e.val[FieldMessageID-1]
	if msg == "" {
		msg = ClearedValue
	}
	return n, bound, bound+len(fieldKeys[FieldMessageID-1])+2+3*len(msg) <= MaxBaggageBytes
}

// remember caches the session s that Bind has just bound into ctx from the
// edit e (as built, before apply), when Bind accepted it whole (no refusal, no display note) and
// nothing of the context's own baggage was merged into it.
func remember(s *Session, h uint64, e *edit, ctx context.Context) {
	t := bindTab.Load()
	if t == nil {
		return
	}
	b := baggage.FromContext(ctx)
	l := localFrom(ctx)
	if l == nil || l.delegated || !sameBaggage(l.rec.B, b) {
		return
	}
	// Exactly the members e sets, and within the cheap bound of fit.
	n, bound, fits := editBound(e)
	// Within the cheap bound, the session fitted and apply did not clear it.
	if b.Len() != n || !fits {
		return
	}
	ent := &bindEntry{key: *s, h: h, bound: bound}
	ent.key.MessageID = ""
	// The entry shares the first Bind's local state, as every Bind it serves
	// shares the entry's: none of them modifies it.
	ent.last.Store(&builtBaggage{msgID: s.MessageID, b: b, loc: l})
	set := t.set(h)
	for i := range set {
		if set[i].CompareAndSwap(nil, ent) {
			return
		}
	}
	// The set is full: evict the way the hash's high bits pick, a choice
	// as good as any for keys that arrive at random.
	set[h>>62].Store(ent)
}
