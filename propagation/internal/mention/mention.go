package mention

import (
	"strings"

	"github.com/sessionwire/sessionwire/otelsession"
)

// Mentioned reports whether a baggage line may hold a session member. It is
// a cheap over-approximation, so that a boundary parses or checks a line
// only when it could matter: it never says no for a line with a session
// member, in any spelling (case-folded, percent-encoded, or with a non-ASCII
// letter that folds to an ASCII one, as U+017F folds to "s"), and may say
// yes for a line without one. One pass: a window of the key prefix's length
// that holds a non-ASCII byte has fewer runes than the prefix and cannot
// fold to it, so only windows that start with a byte folding to its first
// are compared. The pass steps eight bytes at a time over bytes that cannot
// matter (no '%', no non-ASCII byte, none folding to the prefix's first),
// which is most of an application's baggage, and byte by byte elsewhere.
func Mentioned(line string) bool {
	const p = otelsession.KeyPrefix
	for i := 0; i < len(line); {
		if i+8 <= len(line) && quiet(load8(line[i:i+8])) {
			i += 8
			continue
		}
		switch c := line[i]; {
		case c == '%' || c >= 0x80:
			return true
		case c|0x20 == p[0] && len(line)-i >= len(p) && strings.EqualFold(line[i:i+len(p)], p):
			return true
		}
		i++
	}
	return false
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// quiet reports whether none of the eight bytes in w is '%', non-ASCII, or
// one that ORed with 0x20 is the key prefix's first byte (a lower-case
// letter, so the bytes that fold to it by ASCII case).
func quiet(w uint64) bool {
	return w&highs == 0 && !zeroByte(w^(ones*'%')) && !zeroByte((w|ones*0x20)^(ones*uint64(otelsession.KeyPrefix[0])))
}

// zeroByte reports whether any byte of w is zero.
func zeroByte(w uint64) bool { return (w-ones)&^w&highs != 0 }

// load8 is the eight bytes of s, little-endian.
func load8(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
