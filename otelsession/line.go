package otelsession

import (
	"context"
	"unsafe"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
)

// The W3C line of a baggage a writer built. OpenTelemetry's W3C propagator
// writes a baggage as Baggage.String: every member encoded on its own
// (Member.String: the key checked, the value escaped, one string each) and
// the strings joined, most of an outbound step for a full session. A
// baggage an otelsession writer built holds exactly the session members
// its local state records (see apply: a record is made only when every
// session member was set by the edit or kept from a baggage a writer had
// recorded), with no properties and keys of the table, whose values the
// record holds, and the application's members the writer kept from the
// baggage before it, whose keys the state notes (local.appKeys). wireLine
// writes the same members into one string, the session's from the record
// and the application's looked up by key, each value escaped as
// OpenTelemetry escapes it (valueEscapes, learnt from OpenTelemetry
// itself; a member with properties is OpenTelemetry's Member.String); the
// outbound policy sends that line where the W3C propagator would have
// written its own. The members come in the table's order, then the
// application's, where OpenTelemetry's come in its map's (which W3C leaves
// free, and which differs from one call to the next):
// TestWireLineIsTheBaggagesString holds the line to Baggage.String's
// members, and TestValueEscapesAreOpenTelemetrys and FuzzWireLineMember
// each member to Member.String.

// wireLine returns the W3C line of b, ctx's baggage, as OpenTelemetry's W3C
// propagator would write it but for the order of its members, and true,
// when b is the baggage ctx's local state records (a writer built it), or
// one an inbound policy accepted, whose record is in ctx (what a worker
// sends on as it came). Otherwise it returns false, and the caller lets the
// propagator write b.
func wireLine(ctx context.Context, b baggage.Baggage) (string, bool) {
	if b.Len() == 0 {
		return "", false
	}
	var r *sessionstate.Record
	var appKeys []string
	if l := localFrom(ctx); l != nil && sameBaggage(b, l.rec.B) {
		r, appKeys = &l.rec, l.appKeys()
	} else if sessionstate.MayHaveRecord(b) {
		// An inbound policy's record notes no members of the
		// application's: a baggage with any is left to the propagator
		// (the count below).
		r = sessionstate.RecordIn(ctx, b)
	}
	if r == nil || r.Props {
		return "", false
	}
	// The states, the values and the line's exact length in one pass, then
	// the line in one allocation.
	var st [numFields]uint8
	var vals [numFields]string
	n, size := 0, 0
	for _, f := range remoteFields {
		i := int(f) - 1
		vals[i], st[i] = r.Field(i)
		switch st[i] {
		case sessionstate.Unset:
			continue
		case sessionstate.Cleared:
			// The member as the baggage holds it: a writer writes
			// ClearedValue, and a value kept from another writer's
			// baggage is what that one wrote.
			vals[i] = b.Member(fieldKeys[i]).Value()
		}
		n++
		size += len(fieldKeys[i]) + 1 + escapedLen(vals[i])
	}
	// The application's members the writer kept beside the session, looked
	// up in b by the keys it noted. A member with properties is written by
	// OpenTelemetry's own Member.String, which also leaves out a key it
	// would not write (Baggage.String then leaves out the member).
	var appBuf [8]appMember
	app := appBuf[:0]
	for _, k := range appKeys {
		m := b.Member(k)
		if m.Key() == "" {
			return "", false
		}
		a := appMember{key: k, v: m.Value()}
		if len(m.Properties()) > 0 {
			if a.whole, a.key = m.String(), ""; a.whole == "" {
				continue
			}
			size += len(a.whole)
		} else {
			size += len(k) + 1 + escapedLen(a.v)
		}
		app = append(app, a)
		n++
	}
	var async baggage.Member
	switch b.Len() - n - (len(appKeys) - len(app)) {
	case 0:
	case 1:
		// The async capability: the one session member that is not a
		// field.
		if async = b.Member(AsyncDeliveryKey); async.Key() == "" {
			return "", false
		}
		n++
		size += len(AsyncDeliveryKey) + 1 + escapedLen(async.Value())
	default:
		// Members neither the record nor the writer's note describes.
		return "", false
	}
	if n == 0 {
		return "", true
	}
	buf := make([]byte, 0, size+n-1)
	for _, f := range remoteFields {
		if i := int(f) - 1; st[i] != sessionstate.Unset {
			buf = appendMember(buf, fieldKeys[i], vals[i])
		}
	}
	if async.Key() != "" {
		buf = appendMember(buf, AsyncDeliveryKey, async.Value())
	}
	for _, a := range app {
		if a.key == "" {
			if len(buf) > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, a.whole...)
			continue
		}
		buf = appendMember(buf, a.key, a.v)
	}
	// buf is not written again: the line is its bytes.
	return unsafe.String(unsafe.SliceData(buf), len(buf)), true
}

// appMember is one of the application's members as wireLine writes it:
// key and value, or whole, OpenTelemetry's encoding of a member with
// properties (key then "").
type appMember struct {
	key, v, whole string
}

// appendMember appends ",key=value" to buf (no comma first), the value
// escaped as OpenTelemetry escapes it.
func appendMember(buf []byte, key, v string) []byte {
	if len(buf) > 0 {
		buf = append(buf, ',')
	}
	buf = append(buf, key...)
	buf = append(buf, '=')
	const hex = "0123456789ABCDEF"
	start := 0
	for i := 0; i < len(v); i++ {
		if c := v[i]; valueEscapes[c] {
			buf = append(buf, v[start:i]...)
			buf = append(buf, '%', hex[c>>4], hex[c&15])
			start = i + 1
		}
	}
	return append(buf, v[start:]...)
}

// escapedLen is the length of v escaped as OpenTelemetry escapes a value.
func escapedLen(v string) int {
	n := len(v)
	for i := 0; i < len(v); i++ {
		if valueEscapes[v[i]] {
			n += 2
		}
	}
	return n
}

// valueEscapes holds the bytes OpenTelemetry's Member.String writes as
// "%XX" in a value, learnt from it at start-up: every byte that is not
// UTF-8 on its own, '%', and the ASCII bytes W3C does not allow in a
// value (TestValueEscapesAreOpenTelemetrys).
var valueEscapes = func() (t [256]bool) {
	for c := range 256 {
		if c >= 0x80 {
			t[c] = true
			continue
		}
		m, err := baggage.NewMemberRaw("k", string(rune(c)))
		t[c] = err != nil || m.String() != "k="+string(rune(c))
	}
	return t
}()

func init() { sessionstate.WireLine = wireLine }
