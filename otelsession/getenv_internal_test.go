package otelsession

import (
	"strings"
	"testing"
	"unsafe"
)

// Every legacy name is in envByAddr, at the slot its own bytes' address
// hashes to, so that Getenv finds any of them, given as a literal, without
// envEntryOf: the start-up search found a multiplier under which no two
// names share a slot.
func TestEnvByAddrFindsEveryName(t *testing.T) {
	n := 0
	for j := range envSlots {
		e := &envSlots[j]
		if e.f == 0 {
			continue
		}
		n++
		if envByAddr[envAddrSlot(e.name)] != e {
			t.Errorf("%s is not in its slot of envByAddr (multiplier %#x)", e.name, envAddrMul)
		}
	}
	if n != len(Fields()) {
		t.Errorf("%d names in envSlots, %d fields", n, len(Fields()))
	}
}

// A name that shares a legacy name's address but not its length (a prefix
// of it), or its bytes but not its address, is looked up by its bytes: the
// address only decides how fast.
func TestGetenvNameByBytesNotAddress(t *testing.T) {
	name := FieldThreadID.Name()
	prefix := name[:len(name)-3]
	if unsafe.StringData(prefix) != unsafe.StringData(name) {
		t.Fatal("the prefix does not share the name's bytes")
	}
	ctx := With(t.Context(), FieldThreadID, "7")
	if got := Getenv(ctx, prefix, "def"); got != "def" {
		t.Errorf("Getenv(%q) = %q, want the default: it is no field's name", prefix, got)
	}
	if got := Getenv(ctx, strings.Clone(name), "def"); got != "7" {
		t.Errorf("Getenv of %s built at run time = %q, want 7", name, got)
	}
}
