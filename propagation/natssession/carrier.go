package natssession

import (
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// HeaderCarrier adapts a NATS message header to the OpenTelemetry
// propagators.
//
// The OTel propagators read and write lower-case keys (traceparent,
// tracestate, baggage). nats.Header is case-sensitive, so otel's
// propagation.HeaderCarrier, which canonicalises keys to "Traceparent" and
// "Baggage" as HTTP does, would write keys that a NATS consumer using the
// exact names never finds. HeaderCarrier keeps the exact key it is given.
//
// Reading, an exact match wins; only when the exact key is absent does it fall
// back to the keys that differ in case alone, so messages from publishers
// that wrote canonical keys are still understood. Writing, a key replaces
// every variant of itself, so a message never carries two spellings of one
// header that readers could disagree about.
type HeaderCarrier nats.Header

var (
	_ otelprop.TextMapCarrier = HeaderCarrier(nil)
	_ otelprop.ValuesGetter   = HeaderCarrier(nil)
)

// Get returns the first value of key, or "" when there is none.
func (c HeaderCarrier) Get(key string) string {
	if v := c.Values(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values returns every value of key. When the exact key is absent, it returns
// the values of the keys equal to key under case folding, in sorted key order
// so that the result never depends on map iteration.
func (c HeaderCarrier) Values(key string) []string {
	if v, ok := c[key]; ok {
		return v
	}
	var variants []string
	for k := range c {
		if strings.EqualFold(k, key) {
			variants = append(variants, k)
		}
	}
	switch len(variants) {
	case 0:
		return nil
	case 1:
		return c[variants[0]]
	}
	slices.Sort(variants)
	var all []string
	for _, k := range variants {
		all = append(all, c[k]...)
	}
	return all
}

// Set replaces the values of key, and of every key that differs from it in
// case alone, with value. On a nil HeaderCarrier it does nothing: there is no
// map to write to (the publishing helpers of this package allocate one).
func (c HeaderCarrier) Set(key, value string) {
	if c == nil {
		return
	}
	for k := range c {
		if k != key && strings.EqualFold(k, key) {
			delete(c, k)
		}
	}
	c[key] = []string{value}
}

// Delete removes key, exactly as spelled (for propagation.Outbound, which
// removes every spelling of a pre-written baggage header).
func (c HeaderCarrier) Delete(key string) { delete(c, key) }

// Keys returns the header's keys, as they were written.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// SingleValued reports whether Values returns one value at most for every
// key: no key has two values, and no two keys differ in case alone (Values
// joins those). The inbound policy then extracts through Get alone, which
// spares OpenTelemetry's baggage propagator a second building of the
// baggage (see propagation.Inbound.Extract).
func (c HeaderCarrier) SingleValued() bool {
	for _, vs := range c {
		if len(vs) > 1 {
			return false
		}
	}
	return messaging.DistinctUnderFolding(maps.Keys(c))
}

// msgID is the Nats-Msg-Id of a message with header h, as JetStream reads
// it: the first value of the exact key, "" when there is none. An entry
// without values, which only code can build, is none (nats.Header.Get
// panics on it).
func msgID(h nats.Header) string {
	if v := h[jetstream.MsgIDHeader]; len(v) > 0 {
		return v[0]
	}
	return ""
}
