package sessionstate

import (
	"context"
	"math/rand/v2"
	"reflect"
	"strings"
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

// The hints tell maps apart by their hash seed as well as their address.
// The start-up check finds the seed where Go's maps keep it; should a Go
// release move it, this fails, and the hints (correct either way) fall back
// to addresses alone, which a process that frees and reuses baggage maps
// mistakes for one another (TestForeignBaggageIsNotTakenForARecordedOne in
// otelsession).
func TestMapSeedIsReadFromTheRuntimesMap(t *testing.T) {
	if !mapSeeds {
		t.Fatal("the word at mapSeedOffset of a map is not its hash seed in this Go release: find where internal/runtime/maps.Map keeps it")
	}
	seen := map[uintptr]bool{}
	for i := range 100 {
		b, err := baggage.Parse("a=1,session.chat_id=c")
		if err != nil {
			t.Fatal(err)
		}
		s := mapSeed(b)
		if s != mapSeed(b) || b.Member("a").Value() != "1" || s != mapSeed(b) {
			t.Fatalf("map %d: its seed changed while it was read", i)
		}
		seen[s] = true
	}
	if len(seen) < 99 {
		t.Errorf("100 maps of the same members had %d seeds: not a seed drawn for each map", len(seen))
	}
	if mapSeed(baggage.Baggage{}) != 0 {
		t.Error("a baggage without a map has a seed")
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
	rc.R.WriteSpans(&rc.S, "")
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

// A record that writes to spans of a line reads every field as one that
// writes to Values does, whatever mix of values it is given: spans of the
// line, values from elsewhere (three fit beside the line; a fourth moves
// them all into Values of their own), Cleared and Unset ones, a field
// written again; and so does what it copies out (CopyTo, Write).
func TestSpansReadAsValues(t *testing.T) {
	line := "session.chat_id=-100123,session.thread_id=17,session.user_id=u-42,session.message_id=88121"
	inLine := func(v string) string {
		i := strings.Index(line, "="+v)
		if i < 0 {
			t.Fatalf("%q is not in the line", v)
		}
		return line[i+1 : i+1+len(v)]
	}
	outside := func(v string) string { return string([]byte(v)) } // not a span of the line
	rng := rand.New(rand.NewPCG(1, 2))
	values := []func() string{
		func() string { return inLine("-100123") },
		func() string { return inLine("17") },
		func() string { return inLine("88121") },
		func() string { return outside("Ops – EU") },
		func() string { return outside("Ana Lúcia") },
		func() string { return outside("17") }, // equal to a span, but not one
		func() string { return outside(strings.Repeat("x", 300)) },
		func() string { return "" },
		func() string { return ClearedValue },
	}
	for round := range 2000 {
		var spans Spans
		var vals Values
		var got, want Record
		got.WriteSpans(&spans, line)
		want.WriteFresh(&vals)
		for range rng.IntN(3 * NumFields) {
			i := rng.IntN(NumFields)
			if rng.IntN(8) == 0 {
				got.SetUnset(i)
				want.SetUnset(i)
				continue
			}
			v := values[rng.IntN(len(values))]()
			got.SetFromBaggage(i, v)
			want.SetFromBaggage(i, v)
		}
		var copied Values
		got.CopyTo(&copied)
		if copied != vals {
			t.Fatalf("round %d: CopyTo of the spans' record gave %+v; want %+v", round, copied, vals)
		}
		for i := range NumFields {
			gv, gs := got.Field(i)
			wv, ws := want.Field(i)
			if gv != wv || gs != ws {
				t.Fatalf("round %d: field %d is %q, %d; want %q, %d", round, i, gv, gs, wv, ws)
			}
		}
	}
	// Every value a span of the line, or one of three others: no Values.
	var spans Spans
	var r Record
	r.WriteSpans(&spans, line)
	r.SetFromBaggage(0, inLine("-100123"))
	r.SetFromBaggage(1, outside("a"))
	r.SetFromBaggage(2, outside("b"))
	r.SetFromBaggage(2, outside("b2")) // takes the string its field took before
	r.SetFromBaggage(3, outside("c"))
	if r.spanValues() != &spans {
		t.Fatal("three values beside the line's spans moved the record into Values")
	}
	if allocs := testing.AllocsPerRun(100, func() {
		r.WriteSpans(&spans, line)
		for i, v := range []string{"-100123", "17", "u-42", "88121"} {
			r.SetFromBaggage(i, inLine(v))
		}
	}); allocs != 0 {
		t.Errorf("recording spans of the line allocated %v times", allocs)
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
	// the record and its values are to stay within the 256-byte size class.
	if n := unsafe.Sizeof(RecordContext{}); n > 256 {
		t.Errorf("RecordContext is %d bytes; over 256 it takes the next size class, 288", n)
	}
	// Every local state of otelsession holds a Record; the next message's
	// Bind allocates one, 160 bytes with this Record, in its size class.
	if n := unsafe.Sizeof(Record{}); n > 40 {
		t.Errorf("Record is %d bytes, over 40: the next message's local state takes the next size class", n)
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

var sinkRC *RecordContext

// NewRecordContext's record writes to Values of its own, allocated with the
// context in one allocation, every field Unset at first.
func TestNewRecordContext(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { sinkRC = NewRecordContext(context.Background()) }); n != 1 {
		t.Errorf("NewRecordContext allocated %v times; want 1", n)
	}
	rc := NewRecordContext(context.Background())
	for i := range NumFields {
		if v, st := rc.R.Field(i); v != "" || st != Unset {
			t.Fatalf("field %d of a new record: %q, %d; want Unset", i, v, st)
		}
	}
	for i := range 4 { // more values from elsewhere than spans could hold
		rc.R.SetFromBaggage(i, string([]byte{'v', byte('0' + i)}))
	}
	if rc.R.values() == nil {
		t.Fatal("the record does not write to its own Values")
	}
	if v, st := rc.R.Field(3); v != "v3" || st != Set {
		t.Fatalf("field 3 is %q, %d; want v3, Set", v, st)
	}
}
