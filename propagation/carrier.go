package propagation

import (
	"net/http"
	"strings"

	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
)

// Deleter is a carrier that can remove an entry. The carriers of this
// module's transports implement it, so that [Outbound.Inject] removes a
// pre-written baggage entry in every spelling of its name; for a carrier
// that does not, each spelling is overwritten with what is left of it.
type Deleter interface {
	// Delete removes every value of key, exactly as spelled.
	Delete(key string)
}

// stripCarrier removes session members from every entry of c whose key is
// "baggage" in any spelling, keeps the other members in one "baggage" entry,
// and returns how many session members it removed. A carrier without a
// session member is left exactly as it is.
func stripCarrier(c otelprop.TextMapCarrier) int {
	switch h := c.(type) {
	case otelprop.HeaderCarrier:
		return stripHeader(http.Header(h))
	case otelprop.MapCarrier:
		if len(h) == 0 {
			return 0
		}
		var keys []string
		for k := range h {
			if strings.EqualFold(k, baggageHeader) {
				keys = append(keys, k)
			}
		}
		return stripKeys(c, keys, func(k string) []string { return []string{h[k]} }, func(k string) { delete(h, k) })
	}
	var keys []string
	for _, k := range c.Keys() {
		if strings.EqualFold(k, baggageHeader) {
			keys = append(keys, k)
		}
	}
	values := func(k string) []string {
		if vg, ok := c.(otelprop.ValuesGetter); ok {
			return vg.Values(k)
		}
		return []string{c.Get(k)}
	}
	del := func(k string) { c.Set(k, "") }
	if d, ok := c.(Deleter); ok {
		del = d.Delete
	}
	return stripKeys(c, keys, values, del)
}

// stripHeader is stripCarrier for an http.Header, without allocating when no
// entry holds a session member (the common case on every request).
func stripHeader(h http.Header) int {
	found := false
	for k, vs := range h {
		if len(k) == len(baggageHeader) && strings.EqualFold(k, baggageHeader) {
			for _, v := range vs {
				if mentionsOwned(v) {
					found = true
				}
			}
		}
	}
	if !found {
		return 0
	}
	var keys []string
	for k := range h {
		if strings.EqualFold(k, baggageHeader) {
			keys = append(keys, k)
		}
	}
	return stripKeys(otelprop.HeaderCarrier(h), keys, func(k string) []string { return h[k] }, func(k string) { delete(h, k) })
}

func stripKeys(c otelprop.TextMapCarrier, keys []string, values func(string) []string, del func(string)) int {
	if len(keys) == 0 {
		return 0
	}
	var lines []string
	for _, k := range keys {
		lines = append(lines, values(k)...)
	}
	kept, removed := withoutOwnedMembers(lines)
	if removed == 0 {
		return 0
	}
	for _, k := range keys {
		del(k)
	}
	if kept != "" {
		c.Set(baggageHeader, kept)
	}
	return removed
}

// mentionsOwned is a cheap test that may say yes for a line without a
// session member, never no for one with one.
func mentionsOwned(line string) bool {
	for rest := line; rest != ""; {
		var m string
		m, rest, _ = strings.Cut(rest, ",")
		if otelsession.OwnedKey(memberKey(m)) {
			return true
		}
	}
	return false
}

// withoutOwnedMembers returns the members of lines that are not in the
// session namespace, verbatim and joined by commas, and how many it left
// out. Members are not decoded: what is kept is exactly what was written.
func withoutOwnedMembers(lines []string) (string, int) {
	var b strings.Builder
	removed := 0
	for _, line := range lines {
		for rest := line; rest != ""; {
			var m string
			m, rest, _ = strings.Cut(rest, ",")
			if strings.TrimSpace(m) == "" {
				continue
			}
			if otelsession.OwnedKey(memberKey(m)) {
				removed++
				continue
			}
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strings.TrimSpace(m))
		}
	}
	return b.String(), removed
}

// memberKey returns the key of one raw list member: what precedes its "="
// or its properties' ";", without the white space around it. W3C allows
// spaces and tabs there; the OTel parser trims every kind of white space
// (a vertical tab too), so this does: whatever key the parser would read,
// this reads.
func memberKey(m string) string {
	end := len(m)
	for i := 0; i < len(m); i++ {
		if m[i] == '=' || m[i] == ';' {
			end = i
			break
		}
	}
	return strings.TrimSpace(m[:end])
}
