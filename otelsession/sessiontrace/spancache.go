package sessiontrace

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
)

// spanCacheSlots bounds a processor's memo of built attributes: at most this
// many baggages (a bound session's members, and whatever else the
// application put beside them) are kept alive by one processor.
const spanCacheSlots = 256

// spanCache remembers, per baggage, the attributes a processor records for
// the baggage's session: a gateway starts many spans under one bound session
// (every hop of one message), and reading the members and hashing the user id
// again for each cost about 0.3 µs a span. A baggage is immutable, so what
// one processor (one field set, one redaction) records for it never changes;
// the cache belongs to the processor, never shared between configurations.
//
// It is keyed by the identity of the baggage's map. An entry keeps its
// baggage alive, so while an entry holds an address no other map can be
// allocated there: an equal address is the same map. A slot is replaced
// whole, without a lock; a replaced entry's map may then be freed and its
// address reused, but a look-up only trusts the entry the slot holds now,
// whose map is alive.
type spanCache struct {
	slots [spanCacheSlots]atomic.Pointer[spanEntry]
}

// spanEntry is one baggage's attributes. Never modified once stored.
type spanEntry struct {
	id    uintptr
	b     baggage.Baggage // keeps the map at id alive
	attrs []attribute.KeyValue
}

// get returns the attributes recorded for b, built by build on a miss.
// The slice is shared: callers only read it.
func (c *spanCache) get(b baggage.Baggage, build func() []attribute.KeyValue) []attribute.KeyValue {
	id := baggageID(b)
	if id == 0 {
		// No map (an empty baggage, or a Baggage whose layout this
		// version does not know): nothing to key on.
		return build()
	}
	slot := &c.slots[(uint64(id)>>4*0x9E3779B97F4A7C15)>>56%spanCacheSlots]
	if e := slot.Load(); e != nil && e.id == id {
		return e.attrs
	}
	attrs := build()
	slot.Store(&spanEntry{id: id, b: b, attrs: attrs[:len(attrs):len(attrs)]})
	return attrs
}

// baggageID is the address of b's map, 0 when it has none
// (sessionstate.BaggageID); with 0, nothing is cached and every span reads
// its session again.
func baggageID(b baggage.Baggage) uintptr { return sessionstate.BaggageID(b) }

// splitFields returns the fields of fields that are baggage members and the
// local ones (kept beside the baggage, so not named by its identity).
func splitFields(fields []otelsession.Field) (remote, local []otelsession.Field) {
	for _, f := range fields {
		if !f.Valid() {
			continue
		}
		if f.Spec().Baggage() {
			remote = append(remote, f)
		} else {
			local = append(local, f)
		}
	}
	return remote, local
}

// sessionAttributes returns the span attributes of ctx's session: those of
// its baggage from the cache, then the local fields, read every time. The
// result may be shared (the cache's): callers only read it. dst is used
// only when there are local fields to append.
func (p *SpanProcessor) sessionAttributes(ctx context.Context, dst []attribute.KeyValue) []attribute.KeyValue {
	attrs := p.cache.get(baggage.FromContext(ctx), func() []attribute.KeyValue {
		if len(p.remote) == 0 {
			return nil
		}
		return p.r.attributes(ctx, p.remote, make([]attribute.KeyValue, 0, len(p.remote)+1))
	})
	if len(p.local) == 0 {
		return attrs
	}
	dst = append(dst, attrs...)
	return p.r.attributes(ctx, p.local, dst)
}
