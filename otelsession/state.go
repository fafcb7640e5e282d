package otelsession

import (
	"context"
	"sync/atomic"
	"unsafe"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
)

// State is the state of one field in a context.
type State uint8

const (
	// Unset: never bound in this context. [Getenv] falls back to the
	// process environment.
	Unset State = iota
	// Cleared: explicitly empty. [Getenv] returns "" and never falls back, so
	// a stale environment value stays masked.
	Cleared
	// Set: bound to a non-empty value.
	Set
)

func (s State) String() string {
	switch s {
	case Unset:
		return "unset"
	case Cleared:
		return "cleared"
	case Set:
		return "set"
	}
	return "invalid"
}

// ClearedValue is the member value of a Cleared remote field: one NUL byte,
// "%00" on the wire. An empty member value (`session.chat_id=`) would be
// simpler, but some OTel SDKs drop empty-valued members when they extract
// baggage, which turns Cleared into Unset one hop later and unmasks a stale
// environment value there. NUL cannot collide with a real value: no
// environment variable can hold one, and [Bind] refuses values that contain
// it.
const ClearedValue = "\x00"

// engaged latches once any code in the process binds a session with Bind.
var engaged atomic.Bool

// Engaged reports whether [Bind] has been called in this process. It never
// goes back to false. A process that binds sessions per unit of work treats the
// context as authoritative: an Unset field means "no session here", so the
// child-process bridge must not pass the process environment's (last writer
// wins) session variables on. A single-session program that never binds keeps
// its environment fallback.
func Engaged() bool { return engaged.Load() }

// local is the part of a session that never enters baggage: local fields, the
// logical working directory and the delegated-child mark. A *local in a
// context is never modified; writers copy it.
type local struct {
	vals      [numLocal]string
	st        [numLocal]State
	cwd       string
	delegated bool
	// checkedPresent is whether rec.B holds any session member.
	checkedPresent bool
	// nForeign and foreign are the keys of rec.B's members that are not
	// the session's (the application's, kept beside it by the writer):
	// nForeign of them from *foreign on (appKeys), none when nForeign is 0.
	// The record does not describe those members; wireLine looks each up
	// in rec.B. A pointer and a count and not a slice: every writer
	// allocates a state, and a slice would take it to a larger size class.
	nForeign uint8
	// rec.B is the baggage the writer that wrote this local state built
	// from values it validated, nothing of the session kept unchecked from
	// the context before it (nil map: none). While the context's baggage is
	// this very map (baggage maps are immutable), outbound policies need not
	// check it again; once any code replaces the baggage, it is not. The
	// record holds the value and state of every remote field in it, written
	// whenever rec.B is: while the context's baggage is rec.B, readers take
	// them here instead of looking each field up in the baggage. The values
	// it reads are shared with the states copied from this one, and never
	// modified (a writer records into values of its own: localValues).
	rec     sessionstate.Record
	foreign *string
}

// appKeys returns the keys of rec.B's members that are not the session's.
func (l *local) appKeys() []string {
	if l.nForeign == 0 {
		return nil
	}
	return unsafe.Slice(l.foreign, l.nForeign)
}

// setAppKeys notes keys as appKeys. A baggage holds at most
// MaxBaggageMembers; were there more keys than nForeign counts, none would
// be noted, and wireLine would leave the baggage to the propagator.
func (l *local) setAppKeys(keys []string) {
	l.foreign, l.nForeign = nil, 0
	if len(keys) > 0 && len(keys) <= 255 {
		l.foreign, l.nForeign = unsafe.SliceData(keys), uint8(len(keys))
	}
}

// localValues is a local state and the values of its record, allocated
// together by a writer that records a baggage it built.
type localValues struct {
	local
	vals sessionstate.Values
}

// setRemote records v, as the baggage holds it (ClearedValue for Cleared),
// as field index i's value in rec.B.
func (l *local) setRemote(i int, v string) { l.rec.SetFromBaggage(i, v) }

type localKey struct{}

func localFrom(ctx context.Context) *local {
	l, _ := ctx.Value(localKey{}).(*local)
	return l
}

// localContext is its parent holding a local state: what context.WithValue
// of localKey{} would build, that also answers with the state's record of
// its baggage (sessionstate.RecordOf), which Lookup and Getenv read instead
// of looking a field up. A state that records no baggage leaves the
// question to the parent, whose record (an inbound policy's, say) may still
// describe the context's baggage: a write of local fields alone keeps it.
type localContext struct {
	context.Context
	l *local
}

func withLocal(parent context.Context, l *local) context.Context {
	return &localContext{parent, l}
}

func (c *localContext) Value(key any) any {
	switch {
	case key == localKey{}:
		return c.l
	case sessionstate.IsRecordKey(key) && c.l.rec.B.Len() > 0:
		return &c.l.rec
	}
	return c.Context.Value(key)
}

// numLocal is the number of Local fields; localIndex maps a field to its slot
// in local, or -1 for remote fields.
const numLocal = 3

// localIndex is a variable's initializer, not init's work: envSlots, another
// package variable, copies it.
var localIndex = func() (t [numFields]int8) {
	n := 0
	for i := range numFields {
		t[i] = -1
		if table[i].Class == ClassLocal {
			t[i] = int8(n)
			n++
		}
	}
	if n != numLocal {
		panic("otelsession: numLocal does not match the field table")
	}
	return t
}()

// checkedBaggage reports whether b, ctx's baggage, is the one ctx's local
// state records as checked, and whether it holds a session member.
func checkedBaggage(ctx context.Context, b baggage.Baggage) (present, ok bool) {
	l := localFrom(ctx)
	if l == nil || !sameBaggage(b, l.rec.B) {
		return false, false
	}
	return l.checkedPresent, true
}

// sameBaggage reports whether a and b share one map (sessionstate.SameBaggage).
func sameBaggage(a, b baggage.Baggage) bool { return sessionstate.SameBaggage(a, b) }

func init() {
	sessionstate.Checked = checkedBaggage
	sessionstate.HasLocal = func(ctx context.Context) bool { return localFrom(ctx) != nil }
}

// The record's arrays are the field table's, its states are State's, and
// its Cleared marker is ClearedValue: each index below is a compile-time
// constant that must be 0, and the map's two keys must differ.
var (
	_ = [1]struct{}{}[NumFields-sessionstate.NumFields]
	_ = [1]struct{}{}[uint8(Unset)-sessionstate.Unset]
	_ = [1]struct{}{}[uint8(Cleared)-sessionstate.Cleared]
	_ = [1]struct{}{}[uint8(Set)-sessionstate.Set]
	_ = map[bool]struct{}{false: {}, ClearedValue == sessionstate.ClearedValue: {}}
)

// recordOf returns the record of b, ctx's baggage: l's when l, ctx's local
// state, recorded b, else the one ctx holds, nil when neither.
func recordOf(ctx context.Context, b baggage.Baggage, l *local) *sessionstate.Record {
	if l != nil && sameBaggage(b, l.rec.B) {
		return &l.rec
	}
	return sessionstate.RecordOf(ctx, b)
}
