// Package carrierwrap holds the carrier wrappers the session edges share:
// a carrier seen without its W3C baggage entry, and one seen without its
// Values method. It owns nothing else.
package carrierwrap

import (
	"slices"
	"strings"

	otelprop "go.opentelemetry.io/otel/propagation"
)

const baggageKey = "baggage"

// HideBaggage is C without its "baggage" entry, in every spelling of the key,
// through every method a propagator may read it with. Its Values reads C's
// own Values when C has one, else Get.
type HideBaggage struct{ C otelprop.TextMapCarrier }

func (h HideBaggage) Get(key string) string {
	if strings.EqualFold(key, baggageKey) {
		return ""
	}
	return h.C.Get(key)
}

func (h HideBaggage) Values(key string) []string {
	if strings.EqualFold(key, baggageKey) {
		return nil
	}
	if vg, ok := h.C.(otelprop.ValuesGetter); ok {
		return vg.Values(key)
	}
	if v := h.C.Get(key); v != "" {
		return []string{v}
	}
	return nil
}

func (h HideBaggage) Set(key, value string) { h.C.Set(key, value) }

func (h HideBaggage) Keys() []string {
	return slices.DeleteFunc(slices.Clone(h.C.Keys()), func(k string) bool { return strings.EqualFold(k, baggageKey) })
}

// WithoutValues is C, whose keys have one value each, without its Values
// method. Given a carrier with one (otelprop.ValuesGetter), the W3C baggage
// propagator parses every baggage line and then builds the baggage again
// from their members, which doubles the cost of the most expensive step of
// every inbound message; given one line without Values, it parses it once,
// into the same baggage. Where no key has a second value, Get reads exactly
// what Values would, so no propagator can tell the difference.
type WithoutValues struct{ C otelprop.TextMapCarrier }

func (w WithoutValues) Get(key string) string { return w.C.Get(key) }
func (w WithoutValues) Set(key, value string) { w.C.Set(key, value) }
func (w WithoutValues) Keys() []string        { return w.C.Keys() }
