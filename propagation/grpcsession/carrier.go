package grpcsession

import (
	"strings"

	otelprop "go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/metadata"

	"github.com/sessionwire/sessionwire/propagation"
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
