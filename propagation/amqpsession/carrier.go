package amqpsession

import (
	"maps"
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// TableCarrier adapts an AMQP 0-9-1 header table (the Headers of an
// amqp091.Publishing or Delivery) to the OpenTelemetry propagators.
//
// A table value can be of many types. The propagators write strings; a
// string arrives as a string (AMQP long string) and a []byte as a []byte
// (AMQP byte array), and both read as text. An array ([]any) reads as one
// value per text element. Every other type (numbers, booleans, timestamps,
// nested tables, nil) reads as no value: it cannot be trace context or
// baggage, and it is never converted or panicked over.
//
// Keys are case-sensitive. The propagators use lower-case keys (traceparent,
// tracestate, baggage), which TableCarrier writes exactly so; reading, an
// exact key wins, and only when it is absent do keys that differ in case alone
// count, so messages from publishers that wrote canonical spellings still
// work. Writing a key removes its other spellings.
type TableCarrier amqp.Table

var (
	_ otelprop.TextMapCarrier = TableCarrier(nil)
	_ otelprop.ValuesGetter   = TableCarrier(nil)
)

// Get returns the first text value of key, or "".
func (c TableCarrier) Get(key string) string {
	// The common case, an exact key holding one text, builds no list.
	if v, ok := c[key]; ok {
		if s, ok := text(v); ok {
			return s
		}
	}
	if v := c.Values(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values returns the text values of key. When the exact key is absent it
// returns those of the keys equal to key under case folding, in sorted key
// order so that the result never depends on map iteration.
func (c TableCarrier) Values(key string) []string {
	if v, ok := c[key]; ok {
		return texts(v)
	}
	var variants []string
	for k := range c {
		if strings.EqualFold(k, key) {
			variants = append(variants, k)
		}
	}
	slices.Sort(variants)
	var all []string
	for _, k := range variants {
		all = append(all, texts(c[k])...)
	}
	return all
}

func text(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	}
	return "", false
}

func texts(v any) []string {
	if s, ok := text(v); ok {
		return []string{s}
	}
	arr, ok := v.([]any)
	if !ok {
		return nil
	}
	var out []string
	for _, e := range arr {
		if s, ok := text(e); ok {
			out = append(out, s)
		}
	}
	return out
}

// Set replaces key, and every key that differs from it in case alone, with
// the string value. On a nil TableCarrier it does nothing (the publishing
// helper of this package allocates the table).
func (c TableCarrier) Set(key, value string) {
	if c == nil {
		return
	}
	for k := range c {
		if k != key && strings.EqualFold(k, key) {
			delete(c, k)
		}
	}
	c[key] = value
}

// Delete removes key, exactly as spelled (for propagation.Outbound, which
// removes every spelling of a pre-written baggage entry).
func (c TableCarrier) Delete(key string) { delete(c, key) }

// Keys returns the table's keys.
func (c TableCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// SingleValued reports whether Values returns one value at most for every
// key: no value is an array, and no two keys differ in case alone (Values
// joins those). The inbound policy then extracts through Get alone, which
// spares OpenTelemetry's baggage propagator a second building of the
// baggage (see propagation.Inbound.Extract).
func (c TableCarrier) SingleValued() bool {
	for _, v := range c {
		if _, ok := v.([]any); ok {
			return false
		}
	}
	return messaging.DistinctUnderFolding(maps.Keys(c))
}
