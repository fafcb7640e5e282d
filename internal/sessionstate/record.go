package sessionstate

import (
	"context"
	"sync/atomic"
	"unsafe"

	"go.opentelemetry.io/otel/baggage"
)

// NumFields is otelsession.NumFields, the length of a Record's arrays
// (otelsession does not compile when the two differ).
const NumFields = 25

// The states a Record holds, as otelsession.State numbers them.
const (
	Unset uint8 = iota
	Cleared
	Set
)

// ClearedValue is otelsession.ClearedValue, the member value of a Cleared
// field (otelsession does not compile when the two differ).
const ClearedValue = "\x00"

// Record is what one baggage holds of the session's remote fields, written
// by the code that built or accepted that baggage (an otelsession writer,
// an inbound policy) from the values it had in hand, so that otelsession's
// reads need not look each field up in OpenTelemetry's map. It describes B
// and nothing else: it says nothing of the local fields, nor whether B was
// validated (that is Checked's). A context answers the record key
// (IsRecordKey) with its record; a record is never modified once a context
// holds it, nor are the Values it reads.
//
// The values themselves are apart from the record, in Values the record
// points to, so that records of baggages that differ in one field can share
// them: the bind cache derives the next message's record from the last one
// (Derive) without copying the 25 values, which would be most of what a
// next message's Bind allocates beside OpenTelemetry's own copy of its map.
type Record struct {
	B baggage.Baggage // the baggage described
	// The values read: a *Spans when spans, else a *Values; nil: every
	// field Unset. One pointer for either (a field each would make the
	// next message's local state, which holds a Record, take the next
	// size class).
	p unsafe.Pointer
	// A field whose value is not *p's (Derive): its index + 1 (0: none),
	// and its value and state.
	oi    uint8
	ost   uint8
	spans bool
	// Props is whether B's session members may carry W3C properties: a
	// writer's never do (it builds every member without), and an inbound
	// policy clears it only for a line that holds no ';' at all. The
	// outbound line written from the record (WireLine) has none, so it
	// is written only when Props is false.
	Props bool
	ov    string
}

// Values is what a Record holds of each field.
type Values struct {
	Val [NumFields]string // by field index: the value when St is Set, else ""
	St  [NumFields]uint8  // by field index: Unset, Cleared or Set
}

// Spans is Values in under half the bytes, for the record an inbound policy
// makes of a baggage line it accepted: there, a value the line holds as it
// is decoded (no percent-encoding) is a span of the line itself, which the
// record keeps alive anyway. A value that is not (a display name with a
// space or a non-ASCII letter, which the line percent-encodes) takes one of
// three more strings. Unset and Cleared fields are empty spans.
type Spans struct {
	// Str[0] is the line, Str[1:] the values that are not spans of it.
	Str [4]string
	// Sp is, by field index, the field's span and state, packed: the
	// string it is a span of (the top 2 bits), its start (14 bits), its
	// end (14 bits) and its state (the low 2 bits). A W3C baggage line is
	// at most 8,192 bytes; a longer one is not spanned.
	Sp [NumFields]uint32
}

// maxSpanned is the length of the longest string a span can index.
const maxSpanned = 1<<14 - 1

// Field returns the value and state the record holds for field index i.
func (r *Record) Field(i int) (string, uint8) {
	if int(r.oi) == i+1 {
		return r.ov, r.ost
	}
	if r.p == nil {
		return "", Unset
	}
	if !r.spans {
		v := (*Values)(r.p)
		return v.Val[i], v.St[i]
	}
	s := (*Spans)(r.p)
	sp := s.Sp[i]
	return s.Str[sp>>30][sp>>16&maxSpanned : sp>>2&maxSpanned], uint8(sp & 3)
}

// values returns the Values r reads, nil when it reads none or spans.
func (r *Record) values() *Values {
	if r.spans {
		return nil
	}
	return (*Values)(r.p)
}

// spanValues returns the Spans r reads, nil when it reads none or Values.
func (r *Record) spanValues() *Spans {
	if !r.spans {
		return nil
	}
	return (*Spans)(r.p)
}

// setValues makes v the Values r reads, with no field held apart.
func (r *Record) setValues(v *Values) {
	r.p, r.spans, r.oi, r.ost, r.ov = unsafe.Pointer(v), false, 0, 0, ""
}

// Write makes v, which the caller owns and which no record a context holds
// reads, the values r writes to and reads: first the values r held (every
// field Unset for a record that held none).
func (r *Record) Write(v *Values) {
	r.CopyTo(v)
	r.setValues(v)
}

// WriteFresh is Write without the copy: v is cleared, every field Unset.
func (r *Record) WriteFresh(v *Values) {
	*v = Values{}
	r.setValues(v)
}

// WriteSpans is WriteFresh for spans of line: s, which the caller owns and
// which no record a context holds reads, is cleared and holds line, every
// field Unset. A value SetFromBaggage then records is kept as a span of
// line when it is one, as one of s's other strings while one is free, and
// otherwise the record moves every value into Values of its own, allocated
// then.
func (r *Record) WriteSpans(s *Spans, line string) {
	*s = Spans{}
	s.Str[0] = line
	r.p, r.spans, r.oi, r.ost, r.ov = unsafe.Pointer(s), true, 0, 0, ""
}

// CopyTo writes into dst every field's value and state as r holds it.
func (r *Record) CopyTo(dst *Values) {
	switch {
	case r.p == nil:
		*dst = Values{}
	case !r.spans:
		*dst = *(*Values)(r.p)
	default:
		for i := range dst.Val {
			dst.Val[i], dst.St[i] = r.Field(i)
		}
	}
	if r.oi != 0 {
		dst.Val[r.oi-1], dst.St[r.oi-1] = r.ov, r.ost
	}
}

// Derive returns the record of b, a baggage that holds what vals records
// but for field index i, whose member value (as the baggage holds it) is v.
// vals must not be modified while the record is read.
func Derive(b baggage.Baggage, vals *Values, i int, v string) Record {
	r := Record{p: unsafe.Pointer(vals)}
	return r.With(b, i, v)
}

// Detach returns r reading the same values from memory that no context's
// allocation holds, so that keeping the record keeps nothing else alive:
// spans (which WriteSpans puts beside the record, in its context) are
// copied into s, which the caller owns and does not modify once the
// returned record is read; Values, allocated on their own, are shared. ok
// is false when r holds a field apart (Derive, With), which Detach does
// not carry over.
func (r *Record) Detach(s *Spans) (Record, bool) {
	if r.oi != 0 {
		return Record{}, false
	}
	d := *r
	if r.spans {
		*s = *(*Spans)(r.p)
		d.p = unsafe.Pointer(s)
	}
	return d, true
}

// With returns the record of b, a baggage that holds what r describes but
// for field index i, whose member value (as b holds it) is v: Derive for a
// record whose values may be spans. r's values are shared, not copied, and
// must not be modified while either record is read; r holds no field
// apart (Detach's result).
func (r *Record) With(b baggage.Baggage, i int, v string) Record {
	d := *r
	d.B, d.oi = b, uint8(i+1)
	d.ov, d.ost = fromBaggage(v)
	return d
}

// SetFromBaggage records v, a member value as the baggage holds it, as field
// index i's: "" or ClearedValue is Cleared, anything else Set. r writes to
// values given by Write, WriteFresh or WriteSpans.
func (r *Record) SetFromBaggage(i int, v string) {
	v, st := fromBaggage(v)
	if s := r.spanValues(); s != nil && s.set(i, v, st) {
		return
	}
	vals := r.ownValues()
	vals.Val[i], vals.St[i] = v, st
}

// SetUnset records field index i as Unset. r writes to values given by
// Write, WriteFresh or WriteSpans.
func (r *Record) SetUnset(i int) {
	if s := r.spanValues(); s != nil {
		s.set(i, "", Unset)
		return
	}
	vals := r.values()
	vals.Val[i], vals.St[i] = "", Unset
}

// ownValues returns the Values r writes to, moving its spans into Values
// of its own first when it writes to spans.
func (r *Record) ownValues() *Values {
	if r.spans {
		v := new(Values)
		r.CopyTo(v)
		r.setValues(v)
	}
	return (*Values)(r.p)
}

// set records field index i as v with state st, a span of the line or of
// a free string of s; false when it can be neither (nothing is changed).
func (s *Spans) set(i int, v string, st uint8) bool {
	k, off, ok := 0, 0, false
	if off, ok = spanOf(s.Str[0], v); !ok {
		if len(v) > maxSpanned {
			return false
		}
		for k = 1; k < len(s.Str); k++ {
			// A free string, or the one this field's earlier value took.
			if s.Str[k] == "" || int(s.Sp[i]>>30) == k {
				break
			}
		}
		if k == len(s.Str) {
			return false
		}
		s.Str[k] = v
	}
	s.Sp[i] = uint32(k)<<30 | uint32(off)<<16 | uint32(off+len(v))<<2 | uint32(st)
	return true
}

// spanOf returns where v lies in line, when it does: an empty v anywhere.
// The addresses are only compared, never made into pointers again.
func spanOf(line, v string) (int, bool) {
	if v == "" {
		return 0, true
	}
	if len(v) > len(line) || len(line) > maxSpanned {
		return 0, false
	}
	l := uintptr(unsafe.Pointer(unsafe.StringData(line)))
	p := uintptr(unsafe.Pointer(unsafe.StringData(v)))
	if p < l || p-l > uintptr(len(line)-len(v)) {
		return 0, false
	}
	return int(p - l), true
}

// fromBaggage is the value and state of a member value as the baggage
// holds it: "" or ClearedValue is Cleared, anything else Set.
func fromBaggage(v string) (string, uint8) {
	switch v {
	case "", ClearedValue:
		return "", Cleared
	}
	return v, Set
}

type recordKey struct{}

// IsRecordKey reports whether key is the one a context holding a *Record
// answers with it (as RecordContext does).
func IsRecordKey(key any) bool {
	_, ok := key.(recordKey)
	return ok
}

// RecordOf returns the record ctx holds of b, ctx's baggage, nil when the
// nearest record in ctx describes another baggage (code replaced the
// baggage since) or there is none. A baggage never changes, so a record of
// the very same map is exact.
//
// It may also return nil for a baggage whose record ctx does hold, when
// the hint that one was made (Recorded) was since overwritten by another
// baggage's: the caller reads b itself then, which the record describes
// exactly, so a read's result never depends on the hint, only its cost.
func RecordOf(ctx context.Context, b baggage.Baggage) *Record {
	if !MayHaveRecord(b) {
		// No record was made of b (a baggage no sessionwire code built or
		// accepted, the common case this spares the walk of the context),
		// or its hint was overwritten.
		return nil
	}
	return RecordIn(ctx, b)
}

// RecordIn is RecordOf once MayHaveRecord(b) has returned true: the walk of
// the context alone, for the hot reads that test the hint inlined first.
func RecordIn(ctx context.Context, b baggage.Baggage) *Record {
	if r, _ := ctx.Value(recordKey{}).(*Record); r != nil && SameBaggage(r.B, b) {
		return r
	}
	return nil
}

// MayHaveRecord is RecordOf's first step, small enough to be inlined into
// a hot read: false when no record was made of b (or its hint was
// overwritten), so that RecordOf would return nil, which a read of a
// baggage no sessionwire code built then learns without a call.
func MayHaveRecord(b baggage.Baggage) bool {
	id := BaggageID(b)
	return id != 0 && hintOf(id).Load() == id^mapSeed(b)
}

// hints holds, in the slot its address hashes to, the mark of each baggage
// map a record was made for (its address and hash seed), until
// another's takes the slot: what lets RecordOf answer at once for a
// baggage no sessionwire code built or accepted, where it would otherwise
// walk the whole context to learn that no record is there. A slot holds a
// number, not the map: nothing is kept alive, and the garbage collector
// does not scan the table.
//
// The seed is what tells a map from one that the allocator put where a
// recorded map was, once that map was freed: a process that binds sessions
// frees and reuses such memory all the time, and by address alone 82% of
// the baggages a stock propagator extracted in one were taken for recorded
// ones, whose reads then walked the whole context for a record that was not
// there (TestForeignBaggageIsNotTakenForARecordedOne). A mark that matches
// anyway only costs that map's reads the walk, which then finds no record.
var hints [1 << hintBits]atomic.Uintptr

// hintBits sizes the table: 4,096 slots, 32 KiB. A record whose slot
// another took is read from its baggage instead, at the raw read's cost.
const hintBits = 12

func hintOf(id uintptr) *atomic.Uintptr {
	// Fibonacci hashing: the multiplier spreads the aligned addresses of
	// maps allocated one after another over the table.
	return &hints[uint64(id)*0x9E3779B97F4A7C15>>(64-hintBits)]
}

// mapSeed is the hash seed of b's map, which Go draws at random for every
// map it makes and never changes in one that is not written after it is
// built, as a baggage's is not; 0 when b has no map or the runtime's map
// does not keep its seed where mapSeeds found it. It reads the runtime's
// own header of the map (internal/runtime/maps.Map, whose second word is
// the seed), which nothing exports: one load from the cache line the look-up
// of a member reads next anyway. Should a Go release move the seed, the
// start-up check turns it off and the hints go back to the address alone.
func mapSeed(b baggage.Baggage) uintptr {
	if !mapSeeds {
		return 0
	}
	return seedWord(b)
}

// seedWord is the word at mapSeedOffset of b's map, 0 when b has none.
func seedWord(b baggage.Baggage) uintptr {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&b))
	if p == nil {
		return 0
	}
	return *(*uintptr)(unsafe.Add(p, mapSeedOffset))
}

// mapSeedOffset is where the runtime's map header keeps its hash seed.
const mapSeedOffset = 8

// mapSeeds is whether the word at mapSeedOffset of a baggage's map is what
// a seed is: the same on every read of one map, and unlike between two maps
// of the same members (a seed is 64 random bits). A count of members or
// anything else the two maps share fails the check; the hints then carry
// addresses alone, as they did before.
var mapSeeds = func() bool {
	if !mapBaggage {
		return false
	}
	m, err := baggage.NewMemberRaw("k", "v")
	if err != nil {
		return false
	}
	a, errA := baggage.New(m)
	b, errB := baggage.New(m)
	if errA != nil || errB != nil {
		return false
	}
	first := seedWord(a)
	_ = a.Member("k")
	return first == seedWord(a) && first != seedWord(b)
}()

// Recorded notes that a record of b is made, for RecordOf: every writer of a
// record calls it when it sets the record's B, and the bind cache for every
// baggage it hands out (its hint may have been overwritten since it was
// built). A slot that already holds b's mark is not written again, so
// that the other processors reading it keep its cache line.
func Recorded(b baggage.Baggage) {
	id := BaggageID(b)
	if id == 0 {
		return
	}
	mark := id ^ mapSeed(b)
	if h := hintOf(id); h.Load() != mark {
		h.Store(mark)
	}
}

// ForgetRecorded clears every hint, as if each had been overwritten: for
// tests that hold the reads to their results without the records.
func ForgetRecorded() {
	for i := range hints {
		hints[i].Store(0)
	}
}

// RecordContext is its parent holding R: what context.WithValue of the
// record key and &R would build, in one allocation instead of two. Fill R
// before handing the context on.
type RecordContext struct {
	context.Context
	R Record
	// S is where R's values are, once R.WriteSpans(&S, line) says so: the
	// context, its record and the values in one allocation.
	S Spans
	// OwnerKey, when not nil, is one more key the context answers, with
	// the context itself: what the code that accepted the session tells the
	// code after it, without a context of its own (grpcsession's Edge: that
	// its propagator accepted the call's session). It is set before the
	// context is handed on, and is pointer-shaped or an empty struct, so
	// that setting it does not allocate. (One key and no value of its own
	// keeps the context, its record and the values within 256 bytes.)
	OwnerKey any
}

// NewRecordContext returns a RecordContext of parent whose record writes to
// Values allocated with it, in one allocation, every field Unset: for a
// record whose values are not spans of one line (see WriteSpans).
func NewRecordContext(parent context.Context) *RecordContext {
	x := &struct {
		rc RecordContext
		v  Values
	}{rc: RecordContext{Context: parent}}
	x.rc.R.WriteFresh(&x.v)
	return &x.rc
}

// Value answers the record key with the record, and OwnerKey with c.
func (c *RecordContext) Value(key any) any {
	if IsRecordKey(key) {
		return &c.R
	}
	if c.OwnerKey != nil && key == c.OwnerKey {
		return c
	}
	return c.Context.Value(key)
}

// Atop reports whether ctx is itself a RecordContext whose record describes
// b: what an inbound policy returns for a session it accepted, and for
// nothing else (propagation's FuzzExtract holds it to that), so a caller
// holding the policy's result knows without reading b whether b may hold a
// session.
func Atop(ctx context.Context, b baggage.Baggage) bool {
	rc, ok := ctx.(*RecordContext)
	return ok && SameBaggage(rc.R.B, b)
}
