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
// are compared.
func Mentioned(line string) bool {
	const p = otelsession.KeyPrefix
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '%' || c >= 0x80:
			return true
		case c|0x20 == p[0] && len(line)-i >= len(p) && strings.EqualFold(line[i:i+len(p)], p):
			return true
		}
	}
	return false
}
