// Package sessionmetrics records what the session policies decide as
// OpenTelemetry metrics, through the OTel metric API: the global
// MeterProvider, so a program that installs an SDK sees them and one that
// does not pays next to nothing. It owns the instrument names and their
// attributes; the policies (otelsession's writers, propagation's Inbound and
// Outbound) own the decisions.
package sessionmetrics

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of every instrument.
const ScopeName = "github.com/sessionwire/sessionwire"

// Instrument names, with what each counts.
const (
	// InboundName counts sessions arriving at an edge, by transport, outcome
	// (accepted, untrusted, refused) and, for refusals, reason.
	InboundName = "sessionwire.session.inbound"
	// OutboundName counts carriers leaving through an outbound policy, by
	// transport, outcome (sent, withheld: the destination may not receive a
	// session) and whether the session was signed.
	OutboundName = "sessionwire.session.outbound"
	// PrewrittenName counts session members the outbound policy removed
	// from what a carrier already held before injection, by transport.
	PrewrittenName = "sessionwire.session.outbound.prewritten_removed"
	// ValuesName counts display values cut or dropped, by key, outcome
	// (truncated, dropped) and direction (bind, inbound).
	ValuesName = "sessionwire.session.values"
)

// Attribute keys.
const (
	TransportKey = attribute.Key("sessionwire.transport")
	OutcomeKey   = attribute.Key("sessionwire.outcome")
	ReasonKey    = attribute.Key("sessionwire.reason")
	SignedKey    = attribute.Key("sessionwire.signed")
	KeyKey       = attribute.Key("sessionwire.key")
	DirectionKey = attribute.Key("sessionwire.direction")
)

type instruments struct {
	inbound, outbound, prewritten, values metric.Int64Counter
}

var (
	once sync.Once
	inst instruments
	// opts caches the attribute sets: building one per call would cost more
	// than the policy's own checks.
	opts sync.Map // string -> metric.AddOption
)

func get() *instruments {
	once.Do(func() {
		m := otel.GetMeterProvider().Meter(ScopeName)
		// The API returns a usable no-op instrument with any error; the
		// error (an invalid name) cannot happen with these constants.
		inst.inbound, _ = m.Int64Counter(InboundName, metric.WithUnit("{session}"),
			metric.WithDescription("Sessions arriving at an edge, by outcome"))
		inst.outbound, _ = m.Int64Counter(OutboundName, metric.WithUnit("{carrier}"),
			metric.WithDescription("Carriers sent through an outbound session policy, by outcome"))
		inst.prewritten, _ = m.Int64Counter(PrewrittenName, metric.WithUnit("{member}"),
			metric.WithDescription("Session members removed from what a carrier held before injection"))
		inst.values, _ = m.Int64Counter(ValuesName, metric.WithUnit("{value}"),
			metric.WithDescription("Display values truncated or dropped"))
	})
	return &inst
}

func option(cacheKey string, kvs ...attribute.KeyValue) metric.AddOption {
	if o, ok := opts.Load(cacheKey); ok {
		return o.(metric.AddOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	opts.Store(cacheKey, o)
	return o
}

// Inbound counts one inbound session: outcome "accepted", "untrusted" or
// "refused", reason "" unless refused.
func Inbound(transport, outcome, reason string) {
	get().inbound.Add(context.Background(), 1, option("i\x00"+transport+"\x00"+outcome+"\x00"+reason,
		TransportKey.String(transport), OutcomeKey.String(outcome), ReasonKey.String(reason)))
}

// Outbound counts one carrier: outcome "sent" or "withheld".
func Outbound(transport, outcome string, signed bool) {
	s := "0"
	if signed {
		s = "1"
	}
	get().outbound.Add(context.Background(), 1, option("o\x00"+transport+"\x00"+outcome+"\x00"+s,
		TransportKey.String(transport), OutcomeKey.String(outcome), SignedKey.Bool(signed)))
}

// Prewritten counts n session members removed from a carrier.
func Prewritten(transport string, n int) {
	get().prewritten.Add(context.Background(), int64(n), option("p\x00"+transport, TransportKey.String(transport)))
}

// Value counts one display value cut or dropped: outcome "truncated" or
// "dropped", direction "bind" or "inbound".
func Value(key, outcome, direction string) {
	get().values.Add(context.Background(), 1, option("v\x00"+key+"\x00"+outcome+"\x00"+direction,
		KeyKey.String(key), OutcomeKey.String(outcome), DirectionKey.String(direction)))
}
