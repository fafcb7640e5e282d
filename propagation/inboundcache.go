package propagation

import (
	"context"
	"hash/maphash"
	"strings"
	"sync/atomic"
	"unsafe"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
)

// The accepted-session cache: a consumer receives a conversation's session
// on every message of it, and the baggage line it arrives in differs from
// the last message's in the message id (and the signature, when signed)
// and in the order of its members alone. Making the line into a baggage is
// most of the inbound step (a full session's line is about 500 bytes:
// every member split, validated, decoded and put into a map one by one,
// by OpenTelemetry's parser or, for a simple line, its constructors; see
// simpleline.go), and the baggage can be derived from the last message's
// with one Baggage.SetMember, a copy of the map, as the bind cache does for
// Bind.
//
// An entry is a line the policy accepted whole: one line that
// OpenTelemetry's W3C propagator alone parsed (the check's fast path, see
// Inbound.Extract), no display value cut, from a peer it trusted or with a
// signature that verified. A signed line makes an entry only where the
// policy verifies signatures and the carrier binds its signature
// (Peer.MessageID is not "": a NATS message, as the gateway's workers
// receive, a Kafka record, an AMQP message), so that the peer is
// not consulted and the signature, bound to its message or destination, is
// removed once it verified. The
// entry holds the line's members, the baggage OpenTelemetry parsed from it
// (without the signature) and the record of its values.
//
// A later line is served from an entry when its members are the entry's,
// byte for byte, in any order (a sender's W3C propagator writes a
// baggage's members in the order of Go's map iteration, which differs from
// one message to the next), but for the message id's value and the
// signature's, and those are plain (printable ASCII with nothing to
// decode, no properties) and the message id within its length limit.
// OpenTelemetry's parse of that line would build the entry's members and
// the new message id, which is what SetMember of the new id into the
// entry's baggage builds: the entry is made only of a line whose members
// are all valid and of distinct keys (its parse holds as many members as
// it has: none was refused or repeated, so the order in which the parser
// met them does not matter), and whose decoded and encoded size is bounded
// within OpenTelemetry's limits (growthBound), so that its parse drops no
// member of either line. The new signature is verified over the entry's
// values and the new message id, as the check would have read them from
// the line. FuzzInboundCache and TestInboundCacheSignedSessions hold a
// cached extraction to the uncached one.
//
// The scan for repeated, forbidden and local keys runs on every line (it
// finds the message id), the signature or the peer is judged on every
// line, and the counts and metrics are the same; only the parse and the
// check of the values the entry's line already passed are skipped. A line
// the policy refused, or from a peer it did not trust, never makes an
// entry, so an untrusted sender cannot fill the cache; nor does a line seen
// once (admit): an entry is made on a conversation's second message and
// serves from its third. An entry keeps its line alive, the baggage
// OpenTelemetry parsed from it and the record: about 3 to 4 KiB for a full
// session of typical values, and about 11.5 KiB for a line at
// OpenTelemetry's limits (64 members, 8 KiB), as TestInboundCacheMemoryBound
// measures: about 1 MiB typical, 3 MiB at worst, at the default size.

// defaultInboundCacheSize is the number of accepted lines a policy keeps
// by default.
const defaultInboundCacheSize = 256

// inboundWays is the cache's associativity: a new line takes a free slot
// of its set of four, or evicts one of them in turn.
const inboundWays = 4

// WithCacheSize bounds the policy's cache of accepted sessions to about n
// conversations (rounded up to a power of two, at least 4; n <= 0 disables
// it). A consumer receives a conversation's session on every message of
// it, in a baggage line that differs from the last one's in the message id
// alone (and in the order of its members): from the conversation's third
// message, the policy builds the baggage from the last one with
// OpenTelemetry's SetMember instead of parsing and checking the line again,
// and returns the same context it would have built (the signature or the
// peer is still judged on every message). Only sessions accepted whole are
// kept; signed ones only where the policy verifies signatures and the
// carrier binds them (Peer.MessageID is not "": a NATS message, a Kafka
// record, an AMQP message). The default, 256, holds
// the active conversations of a busy consumer in about 1 MiB (3 MiB at
// worst); [Counts].Cached says how many sessions it served.
//
// The cache also keeps a quarter as many lines that name no session (a
// call or message carrying only the application's own baggage): a line
// that comes again byte for byte is given the baggage built from it the
// last time, instead of being made into one again (64 lines by default,
// about 50 KiB for lines of a few members, 1.1 MiB at worst);
// [Counts].CachedNoSession says how many it served.
func WithCacheSize(n int) InboundOption {
	return func(p *Inbound) { p.cache = newInboundCache(n) }
}

type inboundCache struct {
	seed  uint64
	mask  uint64 // sets - 1
	slots []atomic.Pointer[acceptedLine]
	next  atomic.Uint32 // the way the next eviction takes
	// seen holds the keys of lines seen once, by their hash, until another
	// takes the slot: a line makes an entry only when its key was seen
	// before (the conversation's second message), so that a session seen
	// once (a request that is a chat of its own, a one-off job) costs no
	// entry, and the cache keeps no baggage alive for it.
	seen []atomic.Uint64
	// quiet holds the lines that name no session (see below).
	quiet quietTable
}

func newInboundCache(n int) *inboundCache {
	if n <= 0 {
		return nil
	}
	sets := 1
	for sets*inboundWays < n {
		sets *= 2
	}
	return &inboundCache{
		seed:  maphash.Comparable(maphash.MakeSeed(), 0),
		mask:  uint64(sets - 1),
		slots: make([]atomic.Pointer[acceptedLine], sets*inboundWays),
		seen:  make([]atomic.Uint64, sets*inboundWays),
		quiet: newQuietTable(sets * inboundWays),
	}
}

// acceptedLine is one entry: immutable once stored.
type acceptedLine struct {
	h       uint64
	members []lineMember  // the line's, but its message id's and signature's, in the line's order
	msgID   string        // the message id's value, "" when the line has none
	vals    *signedValues // a signed line's session values, as its signature covers them; nil unsigned
	extra   int           // growthBound of the line
	bag     baggage.Baggage
	rec     sessionstate.Record // of bag, reading sp (or Values of its own)
	sp      sessionstate.Spans
}

// lineMember is one raw member of a line and its hash.
type lineMember struct {
	h uint64
	s string
}

// lineKey is a line's members but its message id's and signature's, their
// hash, and those two values: what the cache knows a line by.
type lineKey struct {
	line    string
	msgID   string // "" when the line has none
	hasID   bool
	sig     string // the signature's value, "" when the line has none
	signed  bool
	n       int // members in members
	members [otelsession.MaxBaggageMembers]lineMember
	h       uint64
}

var msgIDClass = &fieldKeys[otelsession.FieldMessageID-1]

// keyOf fills k with line's key; line's raw scan found seen and wrote
// written. It returns false when the line may not be served from the cache
// nor make an entry: its message id's or signature's value is not plain,
// the message id is not within its limit, it has more members than
// OpenTelemetry parses, or it carries a signature and signed is false.
// signed is whether the policy verifies signatures (so that a signed
// session's peer is not consulted) and the carrier binds its signature
// (Peer.MessageID, so that an accepted session's signature is removed): a
// signed line's entry then holds what each message of the conversation is
// accepted into once its own signature verified, over its own message id
// and for its own binding.
func (c *inboundCache) keyOf(k *lineKey, line string, seen keySet, written *writtenMembers, signed bool) bool {
	k.line, k.msgID, k.hasID, k.sig, k.signed, k.n, k.h = line, "", false, "", false, 0, 0
	idStart, sigStart := len(line)+1, len(line)+1 // no member holds them
	offset := func(v string) int {
		return int(uintptr(unsafe.Pointer(unsafe.StringData(v))) - uintptr(unsafe.Pointer(unsafe.StringData(line))))
	}
	if seen&sigBit != 0 {
		v, plain := plainValue(written.rest[sigIdx])
		if !signed || !plain || v == "" {
			return false
		}
		k.sig, k.signed, sigStart = v, true, offset(v)
	}
	if seen&msgIDClass.bit != 0 {
		v, plain := plainValue(written.rest[msgIDClass.idx])
		if !plain || v == "" || len(v) > msgIDClass.spec.MaxLen {
			return false
		}
		k.msgID, k.hasID, idStart = v, true, offset(v)
	}
	// The members' hashes are summed, so that the key does not depend on
	// their order.
	for start := 0; start <= len(line); {
		end := strings.IndexByte(line[start:], ',')
		if end < 0 {
			end = len(line)
		} else {
			end += start
		}
		if (idStart < start || idStart > end) && (sigStart < start || sigStart > end) {
			if k.n == len(k.members) {
				return false
			}
			m := line[start:end]
			h := memberHash(m, c.seed)
			k.members[k.n] = lineMember{h, m}
			k.n++
			k.h += h
		}
		start = end + 1
	}
	if k.hasID {
		k.h += 0x9E3779B97F4A7C15
	}
	if k.signed {
		k.h += 0xBF58476D1CE4E5B9
	}
	k.h = fmix(k.h + uint64(k.n))
	return true
}

func (c *inboundCache) set(h uint64) []atomic.Pointer[acceptedLine] {
	i := (h & c.mask) * inboundWays
	return c.slots[i : i+inboundWays : i+inboundWays]
}

// lookup returns the entry whose line has k's members, in any order, nil
// when none.
func (c *inboundCache) lookup(k *lineKey) *acceptedLine {
	set := c.set(k.h)
	for i := range set {
		if a := set[i].Load(); a != nil && a.h == k.h && a.matches(k) {
			return a
		}
	}
	return nil
}

// matches reports whether k's members are a's, each once, in any order.
// a's members are distinct (its line's parse kept them all), so each of
// k's can be the same as one of them at most.
func (a *acceptedLine) matches(k *lineKey) bool {
	if len(a.members) != k.n || (a.msgID != "") != k.hasID || (a.vals != nil) != k.signed {
		return false
	}
	var used uint64 // len(a.members) <= 64
	for _, m := range k.members[:k.n] {
		j := 0
		for ; j < len(a.members); j++ {
			if am := &a.members[j]; am.h == m.h && used&(1<<j) == 0 && am.s == m.s {
				break
			}
		}
		if j == len(a.members) {
			return false
		}
		used |= 1 << j
	}
	return true
}

// memberHash hashes a raw member for the cache's key, eight bytes at a
// time, mixed with the cache's seed: the key need not tell every two lines
// apart (an entry is compared whole before it serves a line), only spread
// conversations over the sets and the notes of lines seen, and maphash of
// each member took most of the key's time.
func memberHash(m string, seed uint64) uint64 {
	h := seed ^ uint64(len(m))*0x9E3779B97F4A7C15
	p := unsafe.Pointer(unsafe.StringData(m))
	i := 0
	for ; i+8 <= len(m); i += 8 {
		h = (h ^ *(*uint64)(unsafe.Add(p, i))) * 0xff51afd7ed558ccd
		h ^= h >> 32
	}
	var t uint64
	for ; i < len(m); i++ {
		t = t<<8 | uint64(m[i])
	}
	return fmix(h ^ t)
}

// fmix is MurmurHash3's 64-bit finalizer: every bit of h moves every bit
// of the result, the low ones the set index takes included.
func fmix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	return h ^ h>>33
}

// admit reports whether k's line may make an entry: its key was seen
// before. A first sight is noted instead.
func (c *inboundCache) admit(k *lineKey) bool {
	slot := noteSlot(c.seen, k.h)
	if slot.Load() == k.h {
		return true
	}
	slot.Store(k.h)
	return false
}

// noteSlot is the slot of seen that notes the hash h of a line seen once.
func noteSlot(seen []atomic.Uint64, h uint64) *atomic.Uint64 {
	return &seen[h>>7&uint64(len(seen)-1)]
}

// insert puts v into a free slot of set, else into the one next picks.
func insert[T any](set []atomic.Pointer[T], next *atomic.Uint32, v *T) {
	for i := range set {
		if set[i].Load() == nil && set[i].CompareAndSwap(nil, v) {
			return
		}
	}
	set[next.Add(1)%uint32(len(set))].Store(v)
}

// remember makes an entry of k's line, accepted into b (the baggage
// OpenTelemetry parsed from it alone, its signature removed) with the
// record r and the values vals, when its parse provably kept every member
// and in any order would build the same baggage (see above), and r can be
// kept apart from its context.
func (c *inboundCache) remember(k *lineKey, b baggage.Baggage, r *sessionstate.Record, vals *signedValues) {
	n := k.n
	if k.hasID {
		n++
	}
	// A signed line's session was accepted into b without its signature
	// (keyOf), so that b holds the members of k but for it.
	// A line seen once is only noted (admit), before its bytes are read
	// again for the growth bound.
	if b.Len() != n || !c.admit(k) {
		return
	}
	extra := growthBound(k.line)
	if len(k.line)+extra > otelsession.MaxBaggageBytes {
		return
	}
	a := newAcceptedLine(k.n)
	rec, ok := r.Detach(&a.sp)
	if !ok {
		return
	}
	if k.signed {
		a.vals = new(signedValues)
		*a.vals = *vals
	}
	a.h, a.msgID, a.extra, a.bag, a.rec = k.h, k.msgID, extra, b, rec
	copy(a.members, k.members[:k.n])
	insert(c.set(k.h), &c.next, a)
}

// newAcceptedLine returns an entry with room for n members, allocated with
// it: one allocation, in the size class of a full session (16 members).
func newAcceptedLine(n int) *acceptedLine {
	switch {
	case n <= 8:
		return withRoom(n, func(m *[8]lineMember) []lineMember { return m[:] })
	case n <= 16:
		return withRoom(n, func(m *[16]lineMember) []lineMember { return m[:] })
	case n <= 32:
		return withRoom(n, func(m *[32]lineMember) []lineMember { return m[:] })
	}
	return withRoom(n, func(m *[otelsession.MaxBaggageMembers]lineMember) []lineMember { return m[:] })
}

// withRoom allocates an entry and M, an array of members, together, and
// gives the entry n of them (members returns M as a slice).
func withRoom[M any](n int, members func(*M) []lineMember) *acceptedLine {
	x := new(struct {
		a acceptedLine
		m M
	})
	x.a.members = members(&x.m)[:n]
	return &x.a
}

// fromCache is Inbound.Extract's step for a line the cache may serve (k).
// When the cache holds an entry for the line, it returns true and what
// Extract returns; otherwise false, and Extract takes its whole path.
func (p *Inbound) fromCache(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, k *lineKey, peer Peer) (context.Context, bool, error) {
	a := p.cache.lookup(k)
	if a == nil || len(k.line)+a.extra > otelsession.MaxBaggageBytes {
		return nil, false, nil
	}
	b, v := a.bag, k.msgID
	if v != a.msgID {
		m, err := baggage.NewMemberRaw(msgIDClass.spec.Key, v)
		if err != nil {
			return nil, false, nil
		}
		if b, err = b.SetMember(m); err != nil {
			return nil, false, nil
		}
	}
	ctx = extractWith(ctx, prop, carrier, b)
	// What the check reads of the line: the entry's values, the new
	// message id, the new signature. A signed line's context holds no
	// signature: the peer, which might look at it, is not consulted for a
	// session whose signature is verified, and one that verifies is
	// removed before the context is handed on; a session refused or
	// stripped loses it with the rest (Reset).
	// An unsigned line's values are not read (no signature to verify).
	in := inboundSession{present: true, hasSig: k.signed, sig: k.sig}
	if k.signed {
		in.vals = *a.vals
		if pos := signedPos[otelsession.FieldMessageID-1]; k.hasID {
			in.vals[pos].v, in.vals[pos].ok = v, true
		}
	}
	ctx, ok, err := p.decide(ctx, &in, peer)
	if !ok {
		return ctx, true, err
	}
	p.n.cached.Add(1)
	rc := &sessionstate.RecordContext{Context: ctx}
	if v == "" {
		rc.R = a.rec
	} else {
		rc.R = a.rec.With(b, int(otelsession.FieldMessageID)-1, v)
	}
	sessionstate.Recorded(b)
	return rc, true, nil
}

// The cache of lines that name no session: a call or message that carries
// only the application's own baggage ("app.tenant=t-42,app.plan=pro")
// usually carries the same line on every call of a client, and the policy
// returns it as extracted (Inbound.Extract, stockprop.NoSession). Making a
// simple line into a baggage (simpleBaggage) is then most of the step; an
// entry holds a line and the baggage built from it, and serves a later
// line equal to it, byte for byte, with that baggage, which is immutable
// and so shared by every context it is put into. Only simple lines make
// entries, so an entry's baggage is exactly the one simpleBaggage, and
// OpenTelemetry's parser, would build of the line (FuzzInboundCache,
// TestQuietLineCache).
//
// As for sessions, a line seen once is only noted, and makes an entry when
// it comes again: a line unique to one call (a request id in baggage)
// costs its hash and a note, and keeps nothing alive. Such lines come from
// any peer, trusted or not, since they carry no session; a peer can evict
// the entries of others, never have its line served for another (entries
// are compared whole), and fill the table with at most its number of
// entries, each holding its own copy of the line (at most 8 KiB) and the
// baggage built from it (at most 64 members): about 0.8 KiB for a line of
// the application's three members and 17.4 KiB for a line at
// OpenTelemetry's limits (TestQuietLineCacheMemoryBound), for at most 64
// entries at the default size (a quarter of the sessions'): about 50 KiB
// typical, 1.1 MiB at worst.

// quietWays is the associativity of the table of lines that name no session.
const quietWays = 4

// quietLine is an entry of the table of lines that name no session:
// immutable once stored.
type quietLine struct {
	h    uint64
	line string // its own copy
	bag  baggage.Baggage
}

// quietTable is the cache's table of lines that name no session: a
// quarter of its entries, set-associative as the sessions' table.
type quietTable struct {
	mask  uint64 // sets - 1
	slots []atomic.Pointer[quietLine]
	seen  []atomic.Uint64 // the hashes of lines seen once, as inboundCache.seen
	next  atomic.Uint32
}

func newQuietTable(entries int) quietTable {
	sets := max(entries/4/quietWays, 1)
	for sets&(sets-1) != 0 {
		sets &= sets - 1 // a power of two, rounded down
	}
	return quietTable{
		mask:  uint64(sets - 1),
		slots: make([]atomic.Pointer[quietLine], sets*quietWays),
		seen:  make([]atomic.Uint64, sets*quietWays),
	}
}

// quietHash is line's hash for the table of lines that name no session.
func (c *inboundCache) quietHash(line string) uint64 {
	return memberHash(line, c.seed^0xD6E8FEB86659FD93)
}

// quietLookup returns the baggage of the entry for line, whose hash is h,
// and true; false when the table holds none.
func (c *inboundCache) quietLookup(h uint64, line string) (baggage.Baggage, bool) {
	set := c.quietSet(h)
	for j := range set {
		if q := set[j].Load(); q != nil && q.h == h && q.line == line {
			return q.bag, true
		}
	}
	return baggage.Baggage{}, false
}

// quietSet returns the slots of the set of hash h in the table of lines
// that name no session.
func (c *inboundCache) quietSet(h uint64) []atomic.Pointer[quietLine] {
	i := (h & c.quiet.mask) * quietWays
	return c.quiet.slots[i : i+quietWays : i+quietWays]
}

// extractQuiet is Inbound.Extract's step for a carrier whose one baggage
// line, line, names no session and only OpenTelemetry's W3C propagator
// reads (stockprop.NoSession): extractLine, its baggage served from the
// policy's cache when the line was seen before. p may be nil (no policy,
// no cache).
func (p *Inbound) extractQuiet(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, line string) context.Context {
	if p == nil || p.cache == nil || line == "" {
		return extractLine(ctx, prop, carrier, line)
	}
	c := p.cache
	h := c.quietHash(line)
	if b, ok := c.quietLookup(h, line); ok {
		p.n.cachedNoSession.Add(1)
		return extractWith(ctx, prop, carrier, b)
	}
	// A simple line seen before makes an entry, built from a copy of its
	// own, so that the entry keeps no more alive than the line (a
	// carrier's value may share the memory of a larger message); a simple
	// line seen once is only noted.
	slot := noteSlot(c.quiet.seen, h)
	seen := slot.Load() == h
	if seen {
		line = strings.Clone(line)
	}
	b, ok := simpleBaggage(line)
	switch {
	case !ok:
		return resetAndExtract(ctx, prop, carrier)
	case seen:
		insert(c.quietSet(h), &c.quiet.next, &quietLine{h: h, line: line, bag: b})
	default:
		slot.Store(h)
	}
	return extractWith(ctx, prop, carrier, b)
}
