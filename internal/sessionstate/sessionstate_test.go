package sessionstate

import (
	"context"
	"reflect"
	"testing"
	"unsafe"

	"go.opentelemetry.io/otel/baggage"
)

// BaggageID reads the map's address as the one word of a Baggage; it must
// be what reflect says the map field's pointer is, for every baggage,
// whatever OpenTelemetry's version.
func TestBaggageIDIsTheMapPointer(t *testing.T) {
	if !mapBaggage {
		t.Fatal("baggage.Baggage is no longer a single map: every BaggageID is 0 and no record is ever used")
	}
	one, err := baggage.Parse("a=1,session.chat_id=c")
	if err != nil {
		t.Fatal(err)
	}
	empty, err := baggage.Parse("")
	if err != nil {
		t.Fatal(err)
	}
	two := one.DeleteMember("a")
	for name, b := range map[string]baggage.Baggage{"zero": {}, "empty": empty, "one": one, "derived": two} {
		if got, want := BaggageID(b), reflect.ValueOf(b).Field(0).Pointer(); got != want {
			t.Errorf("%s: BaggageID %#x, the map's pointer %#x", name, got, want)
		}
	}
	if BaggageID(one) == 0 || BaggageID(one) == BaggageID(two) {
		t.Error("two maps are not told apart")
	}
}

type otherKey struct{}

// A context's record is returned for its own baggage only (not for another
// map of the same members), and the nearest record of a context is the one
// it holds.
func TestRecordOf(t *testing.T) {
	b, _ := baggage.Parse("session.chat_id=c")
	other, _ := baggage.Parse("session.chat_id=c")
	rc := &RecordContext{Context: context.Background()}
	rc.R.B = b
	rc.R.WriteFresh(&rc.V)
	rc.R.SetFromBaggage(0, "c")
	var ctx context.Context = rc
	Recorded(b)
	if RecordOf(ctx, b) != &rc.R {
		t.Fatal("the context's record of b is not found")
	}
	if RecordOf(ctx, other) != nil {
		t.Fatal("a baggage of the same members but another map found b's record")
	}
	if RecordOf(ctx, baggage.Baggage{}) != nil || RecordOf(context.Background(), b) != nil {
		t.Fatal("a record was found where there is none")
	}
	over := &RecordContext{Context: context.WithValue(ctx, otherKey{}, 1)}
	over.R.B = other
	Recorded(other)
	if RecordOf(over, b) != nil || RecordOf(over, other) != &over.R {
		t.Fatal("the nearest record is not the one returned")
	}
	if over.Value(otherKey{}) != 1 {
		t.Fatal("RecordContext does not pass other keys to its parent")
	}
}

// A derived record reads its values but for the one field it holds apart,
// shares them without modifying them, and a record written from it (Write)
// holds that field as its own value; a record with no values is Unset
// everywhere.
func TestDerivedRecordSharesItsValues(t *testing.T) {
	var zero Record
	for i := range NumFields {
		if v, st := zero.Field(i); v != "" || st != Unset {
			t.Fatalf("field %d of a record with no values: %q, %d; want Unset", i, v, st)
		}
	}
	b1, _ := baggage.Parse("session.chat_id=c,session.message_id=m1")
	b2, _ := baggage.Parse("session.chat_id=c,session.message_id=m2")
	var base Record
	var vals Values
	base.B = b1
	base.WriteFresh(&vals)
	base.SetFromBaggage(2, "c")
	base.SetFromBaggage(13, "m1")
	base.SetFromBaggage(4, ClearedValue)
	d := Derive(b2, &vals, 13, "m2")
	cleared := Derive(b2, &vals, 13, "")
	for _, c := range []struct {
		r       *Record
		i       int
		v       string
		st      uint8
		comment string
	}{
		{&base, 13, "m1", Set, "the base's own value"},
		{&d, 13, "m2", Set, "the derived record's field"},
		{&d, 2, "c", Set, "a shared value"},
		{&d, 4, "", Cleared, "a shared Cleared field"},
		{&d, 7, "", Unset, "a shared Unset field"},
		{&cleared, 13, "", Cleared, "a field derived as empty"},
	} {
		if v, st := c.r.Field(c.i); v != c.v || st != c.st {
			t.Errorf("%s: field %d is %q, %d; want %q, %d", c.comment, c.i, v, st, c.v, c.st)
		}
	}
	if !SameBaggage(d.B, b2) {
		t.Error("the derived record does not describe its baggage")
	}
	// A writer that starts from the derived record holds its values apart.
	w := d
	var own Values
	w.Write(&own)
	w.SetFromBaggage(2, "c2")
	if v, _ := w.Field(13); v != "m2" {
		t.Errorf("written from the derived record, the message id is %q; want m2", v)
	}
	if v, _ := d.Field(2); v != "c" {
		t.Errorf("a write to a copy changed the derived record: %q", v)
	}
	if vals.Val[13] != "m1" || vals.Val[2] != "c" {
		t.Errorf("the shared values were modified: %q", vals.Val)
	}
}

// RecordOf looks for a record only of a baggage Recorded was told of, until
// its hint is overwritten: then it returns nil, and the caller reads the
// baggage itself.
func TestRecordOfTakesTheHint(t *testing.T) {
	b, _ := baggage.Parse("session.chat_id=c")
	rc := &RecordContext{Context: context.Background()}
	rc.R.B = b
	id := BaggageID(b)
	defer ForgetRecorded()
	for _, step := range []struct {
		after string
		do    func()
		found bool
	}{
		{"no hint", ForgetRecorded, false},
		{"Recorded", func() { Recorded(b) }, true},
		{"the hints cleared", ForgetRecorded, false},
		// Another map whose address takes b's slot overwrites its hint.
		{"another address took its slot", func() { Recorded(b); hintOf(id).Store(id ^ 1) }, false},
		{"Recorded again", func() { Recorded(b) }, true},
	} {
		step.do()
		if got := RecordOf(rc, b) == &rc.R; got != step.found {
			t.Fatalf("after %s: the record is found: %v, want %v", step.after, got, step.found)
		}
		// The inlined first step, and the walk the hot reads take after it.
		if got := MayHaveRecord(b) && RecordIn(rc, b) == &rc.R; got != step.found {
			t.Fatalf("after %s: MayHaveRecord then RecordIn find the record: %v, want %v", step.after, got, step.found)
		}
	}
}

// A RecordContext answers its owner's key with itself, any other key as its
// parent does (one of another type that cannot be compared included), and
// no owner's key while it has none.
func TestRecordContextOwner(t *testing.T) {
	// The inbound policy allocates one per accepted session: the context,
	// the record and its values are to stay within the 512-byte size class.
	if n := unsafe.Sizeof(RecordContext{}); n > 512 {
		t.Errorf("RecordContext is %d bytes; over 512 it takes the next size class, 576", n)
	}
	type ownerKey struct{ p *int }
	type parentKey struct{}
	n := 1
	parent := context.WithValue(context.Background(), parentKey{}, "parent")
	rc := &RecordContext{Context: parent}
	if got := rc.Value(ownerKey{&n}); got != nil {
		t.Fatalf("a context without an owner answered %v", got)
	}
	rc.OwnerKey = ownerKey{&n}
	if got := rc.Value(ownerKey{&n}); got != rc {
		t.Fatalf("the owner's key answered %v", got)
	}
	m := 2
	if got := rc.Value(ownerKey{&m}); got != nil {
		t.Fatalf("another owner's key answered %v", got)
	}
	if got := rc.Value(parentKey{}); got != "parent" {
		t.Fatalf("the parent's key answered %v", got)
	}
	if got := rc.Value([]int{1}); got != nil {
		t.Fatalf("a key that cannot be compared answered %v", got)
	}
	if got, ok := rc.Value(recordKey{}).(*Record); !ok || got != &rc.R {
		t.Fatalf("the record key answered %v", got)
	}
}
