package sessionstate

import (
	"context"
	"reflect"
	"unsafe"

	"go.opentelemetry.io/otel/baggage"
)

// Checked reports, when ok, that b, the baggage the caller read from ctx, is
// exactly what an otelsession writer built from values it validated (no
// refused value, no stray key in the session namespace, no signature), and
// whether it holds any session member (present). ok false means nothing is
// known: the caller checks the baggage itself. Set by otelsession's init.
var Checked = func(ctx context.Context, b baggage.Baggage) (present, ok bool) { return false, false }

// WireLine returns, when ok, the W3C baggage line OpenTelemetry's W3C
// propagator would write for b, the baggage the caller read from ctx, but
// for the order of its members: for a baggage an otelsession writer built,
// written from the record of its values and the application's members the
// writer kept beside them.
// ok false means the propagator writes b. Set by otelsession's init.
var WireLine = func(ctx context.Context, b baggage.Baggage) (line string, ok bool) { return "", false }

// HasLocal reports whether ctx holds session state that lives beside the
// baggage (local fields, the working directory, the delegated-child mark,
// the record of a checked baggage), whatever its values. Set by
// otelsession's init.
var HasLocal = func(context.Context) bool { return false }

// BaggageID is the address of b's map, 0 when it has none. baggage.Baggage
// hides its map and has no identity method. Baggage is immutable, so two
// baggages with one ID hold the same members. Should the type ever stop
// being a single map, every ID is 0 and no two baggages are ever known to
// be the same.
//
// A struct whose one field is a map is, in memory, that map's pointer (the
// layout mapBaggage checks with reflect at start-up), so the ID is read as
// that word: what reflect's Value.Pointer returns for the field
// (TestBaggageIDIsTheMapPointer), at the cost of one load instead of about
// 5 ns, which a Lookup of 50 ns would feel. The word is never turned back
// into a pointer.
func BaggageID(b baggage.Baggage) uintptr {
	if !mapBaggage {
		return 0
	}
	return *(*uintptr)(unsafe.Pointer(&b))
}

// SameBaggage reports whether a and b are known to share one map.
func SameBaggage(a, b baggage.Baggage) bool {
	id := BaggageID(a)
	return id != 0 && id == BaggageID(b)
}

var mapBaggage = func() bool {
	t := reflect.TypeFor[baggage.Baggage]()
	return t.Kind() == reflect.Struct && t.NumField() == 1 && t.Field(0).Type.Kind() == reflect.Map &&
		t.Size() == unsafe.Sizeof(uintptr(0))
}()
