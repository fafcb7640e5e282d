package kafkasession

import (
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// RecordCarrier adapts the headers of a franz-go record to the OpenTelemetry
// propagators.
//
// Kafka header keys are case-sensitive byte strings and may repeat. The
// propagators use lower-case keys (traceparent, tracestate, baggage), which
// RecordCarrier writes exactly so. Reading, the headers with the exact key
// win; only when there is none does it fall back to keys that differ in case
// alone, so records from producers that wrote canonical HTTP spellings
// (Baggage, Traceparent) still work. Writing, a key replaces every header with
// that key or a spelling of it, so a record never carries two baggage headers
// that readers could disagree about.
type RecordCarrier struct {
	r *kgo.Record
}

var (
	_ otelprop.TextMapCarrier = RecordCarrier{}
	_ otelprop.ValuesGetter   = RecordCarrier{}
)

// NewRecordCarrier returns a carrier over r's headers. A nil r reads as no
// headers and ignores writes.
func NewRecordCarrier(r *kgo.Record) RecordCarrier { return RecordCarrier{r: r} }

// Get returns the first value of key, or "" when there is none: the first
// of what Values returns, without building the list (the propagators call
// Get for every header they read).
func (c RecordCarrier) Get(key string) string {
	if c.r == nil {
		return ""
	}
	folded := -1
	for i, h := range c.r.Headers {
		switch {
		case h.Key == key:
			return string(h.Value)
		case folded < 0 && strings.EqualFold(h.Key, key):
			folded = i
		}
	}
	if folded >= 0 {
		return string(c.r.Headers[folded].Value)
	}
	return ""
}

// Values returns every value of key in header order, or, when no header has
// exactly that key, every value of the keys equal to it under case folding.
func (c RecordCarrier) Values(key string) []string {
	if c.r == nil {
		return nil
	}
	var exact, folded []string
	for _, h := range c.r.Headers {
		switch {
		case h.Key == key:
			exact = append(exact, string(h.Value))
		case exact == nil && strings.EqualFold(h.Key, key):
			folded = append(folded, string(h.Value))
		}
	}
	if exact != nil {
		return exact
	}
	return folded
}

// Set replaces every header whose key is key, or a spelling of it, with one
// header key=value, appended after the others.
func (c RecordCarrier) Set(key, value string) {
	if c.r == nil {
		return
	}
	kept := c.r.Headers[:0]
	for _, h := range c.r.Headers {
		if !strings.EqualFold(h.Key, key) {
			kept = append(kept, h)
		}
	}
	clear(c.r.Headers[len(kept):])
	c.r.Headers = append(kept, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Delete removes every header whose key is key, exactly as spelled (for
// propagation.Outbound, which removes every spelling of a pre-written
// baggage header).
func (c RecordCarrier) Delete(key string) {
	if c.r == nil {
		return
	}
	kept := c.r.Headers[:0]
	for _, h := range c.r.Headers {
		if h.Key != key {
			kept = append(kept, h)
		}
	}
	clear(c.r.Headers[len(kept):])
	c.r.Headers = kept
}

// Keys returns the distinct header keys, in order of first appearance.
func (c RecordCarrier) Keys() []string {
	if c.r == nil {
		return nil
	}
	keys := make([]string, 0, len(c.r.Headers))
	// A record has a handful of headers, and the outbound policy lists them
	// for every record it sends: a linear search costs less than a map.
	// Past a few dozen, the map keeps it linear.
	if len(c.r.Headers) <= 16 {
		for _, h := range c.r.Headers {
			if !slices.Contains(keys, h.Key) {
				keys = append(keys, h.Key)
			}
		}
		return keys
	}
	seen := make(map[string]bool, len(c.r.Headers))
	for _, h := range c.r.Headers {
		if !seen[h.Key] {
			seen[h.Key] = true
			keys = append(keys, h.Key)
		}
	}
	return keys
}

// SingleValued reports whether Values returns one value at most for every
// key: no two headers have keys equal under case folding. The inbound
// policy then extracts through Get alone, which spares OpenTelemetry's
// baggage propagator a second building of the baggage (see
// propagation.Inbound.Extract).
func (c RecordCarrier) SingleValued() bool {
	if c.r == nil {
		return true
	}
	return messaging.DistinctUnderFolding(func(yield func(string) bool) {
		for _, h := range c.r.Headers {
			if !yield(h.Key) {
				return
			}
		}
	})
}
