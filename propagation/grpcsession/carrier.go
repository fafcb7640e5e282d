package grpcsession

import (
	"maps"
	"strings"

	otelprop "go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/metadata"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// MetadataCarrier adapts gRPC metadata to the OpenTelemetry propagators and
// to the outbound policy.
//
// gRPC metadata keys are lower-case on the wire (HTTP/2 requires it), and
// metadata.MD built through its own functions lower-cases them. A map built
// by hand can still hold "Baggage"; MetadataCarrier looks keys up in lower
// case first and then under case folding, so that no spelling of a key is
// missed, and writes lower-case keys only. Several values of one key are
// several lines, as several HTTP header lines are: Values returns them all,
// and the W3C baggage propagator joins them.
type MetadataCarrier metadata.MD

var (
	_ otelprop.TextMapCarrier = MetadataCarrier(nil)
	_ otelprop.ValuesGetter   = MetadataCarrier(nil)
	_ propagation.Deleter     = MetadataCarrier(nil)
)

// Get returns the first value of key, or "" when there is none.
func (c MetadataCarrier) Get(key string) string {
	if v := c.Values(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values returns every value of key in every spelling of it, the lower-case
// spelling first.
func (c MetadataCarrier) Values(key string) []string {
	lk := strings.ToLower(key)
	all := c[lk]
	for k, vs := range c {
		if k != lk && strings.EqualFold(k, key) {
			all = append(all[:len(all):len(all)], vs...)
		}
	}
	return all
}

// Set replaces every spelling of key with one lower-case key holding value.
// On a nil carrier it does nothing.
func (c MetadataCarrier) Set(key, value string) {
	if c == nil {
		return
	}
	c.Delete(key)
	c[strings.ToLower(key)] = []string{value}
}

// Keys returns the keys as the map holds them.
func (c MetadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Delete removes every value of key in every spelling of it.
func (c MetadataCarrier) Delete(key string) {
	for k := range c {
		if strings.EqualFold(k, key) {
			delete(c, k)
		}
	}
}

// callMD is the carrier the interceptors use over the metadata of one call,
// a copy that metadata.FromIncomingContext or FromOutgoingContext returned
// with lower-cased keys. MetadataCarrier walks the whole map on every read
// and write to find other spellings of the key; the propagators and the
// policy touch a call's metadata about six times, and those walks cost more
// than the rest of the policy's bookkeeping. While every key of the map is
// lower-case ASCII, an ASCII key matches under case folding only its own
// lower-case spelling, so one map look-up gives exactly MetadataCarrier's
// answer. The first key written that is not lower-case ASCII (no W3C
// propagator writes one) turns the walks back on.
type callMD struct {
	md    metadata.MD
	plain bool // every key of md is lower-case ASCII
}

var (
	_ otelprop.TextMapCarrier = (*callMD)(nil)
	_ otelprop.ValuesGetter   = (*callMD)(nil)
	_ propagation.Deleter     = (*callMD)(nil)
)

func newCallMD(md metadata.MD) *callMD {
	c := &callMD{md: md, plain: true}
	for k := range md {
		if !lowerASCII(k) {
			c.plain = false
			break
		}
	}
	return c
}

// lowerASCII reports whether s is ASCII without an upper-case letter.
func lowerASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || c >= 'A' && c <= 'Z' {
			return false
		}
	}
	return true
}

// fast returns the one spelling of key the map can hold, or false when
// MetadataCarrier's walk is needed.
func (c *callMD) fast(key string) (string, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] >= 0x80 {
			return "", false
		}
	}
	return strings.ToLower(key), c.plain // no allocation for a lower-case key
}

func (c *callMD) Get(key string) string {
	if v := c.Values(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c *callMD) Values(key string) []string {
	if lk, ok := c.fast(key); ok {
		return c.md[lk]
	}
	return MetadataCarrier(c.md).Values(key)
}

func (c *callMD) Set(key, value string) {
	if c.md == nil {
		return
	}
	if lk, ok := c.fast(key); ok {
		c.md[lk] = []string{value}
		return
	}
	MetadataCarrier(c.md).Set(key, value)
	if !lowerASCII(strings.ToLower(key)) {
		c.plain = false
	}
}

func (c *callMD) Keys() []string { return MetadataCarrier(c.md).Keys() }

// SingleValued reports whether Values returns one value at most for every
// key: no key has two values, and no two keys differ in case alone (Values
// joins those). Get then reads exactly what Values would.
func (c *callMD) SingleValued() bool {
	for _, vs := range c.md {
		if len(vs) > 1 {
			return false
		}
	}
	return c.plain || messaging.DistinctUnderFolding(maps.Keys(c.md))
}

func (c *callMD) Delete(key string) {
	if lk, ok := c.fast(key); ok {
		delete(c.md, lk)
		return
	}
	MetadataCarrier(c.md).Delete(key)
}
