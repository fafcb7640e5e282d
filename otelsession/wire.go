package otelsession

import (
	"fmt"
	"unicode/utf8"
)

// OwnedKey reports whether a baggage member key is in the session namespace:
// whether it starts with [KeyPrefix] once percent-decoded (as often as it
// decodes) and with ASCII case folded. Another SDK may decode keys (the
// OpenTelemetry JavaScript one does), so "session%2Echat_id" that passes one
// hop as a foreign member would be session.chat_id at the next: it is a
// session member here, whatever its spelling.
//
// An owned key that [SpecOf] does not know in its canonical spelling is
// refused by the inbound policy ([ErrUnknownSessionKey]), stripped by the
// outbound one, and dropped by [Bind], [Clear] and [Reset]; it is never
// passed on as "not ours".
func OwnedKey(key string) bool {
	if len(key) >= len(KeyPrefix) && key[:len(KeyPrefix)] == KeyPrefix {
		return true
	}
	if len(key) == 0 {
		return false
	}
	// Cheap refusal: without an escape the first byte must fold to 's'.
	if c := key[0]; c != 's' && c != 'S' && c != '%' && indexByte(key, '%') < 0 {
		return false
	}
	for range 4 { // "%252E" and deeper: as many rounds as any decoder will do
		if hasPrefixFold(key, KeyPrefix) {
			return true
		}
		d, changed := percentDecode(key)
		if !changed {
			return false
		}
		key = d
	}
	return hasPrefixFold(key, KeyPrefix)
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// percentDecode decodes every valid %XX escape and leaves anything else as it
// is: a lenient decoder sees more keys as owned, never fewer.
func percentDecode(s string) (string, bool) {
	first := indexByte(s, '%')
	if first < 0 {
		return s, false
	}
	b := append(make([]byte, 0, len(s)), s[:first]...)
	changed := false
	for i := first; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b = append(b, hi<<4|lo)
				i += 2
				changed = true
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b), changed
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ValidateValue checks v as a value of the key s describes. It is the one
// rule for values: Bind, With and the other writers apply it, and so do the
// inbound and outbound policies and the child-process bridge, so a value
// Bind accepts is accepted by every receiving edge, and the reverse.
//
// A valid value is at most s.MaxLen bytes of UTF-8 without control
// characters (C0 and DEL), and without U+FFFD, which is what a decoder
// leaves of bytes that were not UTF-8. The empty value is valid (Cleared).
//
// It returns the value to carry, and:
//   - nil when v is valid (the value is v);
//   - for a display key ([ClassDisplay]), an error wrapping
//     [ErrValueTruncated] with v cut to s.MaxLen at a UTF-8 boundary, or
//     wrapping [ErrValueDropped] with "" when v holds a character no edge
//     accepts: the session is kept;
//   - for every other key, an error wrapping [ErrInvalidValue] (and
//     [ErrValueTooLong] when v is too long): the value must be refused.
//
// Errors name the key and never the value, which may be personal data.
func ValidateValue(s Spec, v string) (string, error) {
	bad := badChar(v)
	switch {
	case bad == "" && len(v) <= s.MaxLen:
		return v, nil
	case s.Class == ClassDisplay && bad != "":
		return "", fmt.Errorf("%s: %s: %w", s.Key, bad, ErrValueDropped)
	case s.Class == ClassDisplay:
		return truncate(v, s.MaxLen), fmt.Errorf("%s: %d bytes, cut to %d: %w", s.Key, len(v), s.MaxLen, ErrValueTruncated)
	case bad != "":
		return v, fmt.Errorf("%s: %s: %w", s.Key, bad, ErrInvalidValue)
	}
	return v, fmt.Errorf("%s: %d bytes, limit %d: %w", s.Key, len(v), s.MaxLen, ErrValueTooLong)
}

// badChar names what makes v unusable, or returns "". One pass: it runs for
// every value at every edge.
func badChar(v string) string {
	for i := 0; i < len(v); {
		c := v[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return "control character"
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(v[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return "not valid UTF-8"
		case r == utf8.RuneError:
			return "U+FFFD (bytes that were not UTF-8)"
		}
		i += n
	}
	return ""
}

// truncate cuts v to at most n bytes without splitting a character.
func truncate(v string, n int) string {
	if len(v) <= n {
		return v
	}
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n]
}
