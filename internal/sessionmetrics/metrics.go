// Package sessionmetrics records what the session policies decide as
// OpenTelemetry metrics, through the OTel metric API: the global
// MeterProvider, so a program that installs an SDK sees them and one that
// does not pays next to nothing. It owns the instrument names and their
// attributes; the policies (otelsession's writers, propagation's Inbound and
// Outbound) own the decisions.
package sessionmetrics

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

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
	// opts caches the attribute sets, each as the one-element option list
	// Add takes: building one per call (or the string key and the variadic
	// slice of the cache it replaced) would cost more than the policy's own
	// checks. The map is replaced, never written, so a read takes no lock.
	opts   atomic.Pointer[map[optKey][]metric.AddOption]
	optsMu sync.Mutex
)

// optKey names one attribute set: the counter and its attribute values.
type optKey struct {
	counter byte
	a, b, c string
}

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

// option returns the cached option list of k, building it with kvs the
// first time.
func option(k optKey, kvs func() []attribute.KeyValue) []metric.AddOption {
	if m := opts.Load(); m != nil {
		if o, ok := (*m)[k]; ok {
			return o
		}
	}
	optsMu.Lock()
	defer optsMu.Unlock()
	old := opts.Load()
	if old != nil {
		if o, ok := (*old)[k]; ok {
			return o
		}
	}
	m := make(map[optKey][]metric.AddOption, 1+mapLen(old))
	if old != nil {
		maps.Copy(m, *old)
	}
	o := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs()...))}
	m[k] = o
	opts.Store(&m)
	return o
}

func mapLen(m *map[optKey][]metric.AddOption) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// Inbound counts one inbound session: outcome "accepted", "untrusted" or
// "refused", reason "" unless refused.
func Inbound(transport, outcome, reason string) {
	get().inbound.Add(context.Background(), 1, inboundOption(transport, outcome, reason)...)
}

// inboundOpts holds Inbound's option lists by transport and outcome
// (accepted, untrusted: the outcomes without a reason), so that counting a
// session, which every inbound carrier with one does, finds its list without
// hashing a key; a refusal, or any other transport, goes through the map.
var inboundOpts [len(outboundTransports)][2]atomic.Pointer[[]metric.AddOption]

func inboundOption(transport, outcome, reason string) []metric.AddOption {
	build := func() []metric.AddOption {
		return option(optKey{'i', transport, outcome, reason}, func() []attribute.KeyValue {
			return []attribute.KeyValue{TransportKey.String(transport), OutcomeKey.String(outcome), ReasonKey.String(reason)}
		})
	}
	if reason != "" {
		return build()
	}
	return byIndex(&inboundOpts, transport, outcome, [2]string{"accepted", "untrusted"}, build)
}

// byIndex returns the option list slots holds for transport and outcome,
// one of outcomes, built by build on first use; any other transport or
// outcome is built every time (through option's map).
func byIndex(slots *[len(outboundTransports)][2]atomic.Pointer[[]metric.AddOption], transport, outcome string, outcomes [2]string, build func() []metric.AddOption) []metric.AddOption {
	t, w := transportIndex(transport), -1
	switch outcome {
	case outcomes[0]:
		w = 0
	case outcomes[1]:
		w = 1
	}
	if t < 0 || w < 0 {
		return build()
	}
	p := &slots[t][w]
	if o := p.Load(); o != nil {
		return *o
	}
	o := build()
	p.Store(&o)
	return o
}

// transportIndex is transport's index in outboundTransports, -1 for none.
func transportIndex(transport string) int {
	for i, n := range outboundTransports {
		if n == transport {
			return i
		}
	}
	return -1
}

// Outbound counts one carrier: outcome "sent" or "withheld".
func Outbound(transport, outcome string, signed bool) {
	get().outbound.Add(context.Background(), 1, outboundOption(transport, outcome, signed)...)
}

// outboundTransports are the transports propagation names (its Transport
// constants), whose Outbound option lists are kept in outboundOpts.
var outboundTransports = [...]string{"http", "grpc", "nats", "kafka", "amqp", "env"}

// outboundOpts holds Outbound's option lists by signed, transport and
// outcome (sent, withheld), so that counting a carrier, which every outbound
// injection does, finds its list without hashing a key; any other
// transport or outcome goes through the map.
var outboundOpts [2][len(outboundTransports)][2]atomic.Pointer[[]metric.AddOption]

func outboundOption(transport, outcome string, signed bool) []metric.AddOption {
	s, sg := "0", 0
	if signed {
		s, sg = "1", 1
	}
	return byIndex(&outboundOpts[sg], transport, outcome, [2]string{"sent", "withheld"}, func() []metric.AddOption {
		return option(optKey{'o', transport, outcome, s}, func() []attribute.KeyValue {
			return []attribute.KeyValue{TransportKey.String(transport), OutcomeKey.String(outcome), SignedKey.Bool(signed)}
		})
	})
}

// Prewritten counts n session members removed from a carrier.
func Prewritten(transport string, n int) {
	get().prewritten.Add(context.Background(), int64(n), option(optKey{'p', transport, "", ""}, func() []attribute.KeyValue {
		return []attribute.KeyValue{TransportKey.String(transport)}
	})...)
}

// Value counts one display value cut or dropped: outcome "truncated" or
// "dropped", direction "bind" or "inbound".
func Value(key, outcome, direction string) {
	get().values.Add(context.Background(), 1, option(optKey{'v', key, outcome, direction}, func() []attribute.KeyValue {
		return []attribute.KeyValue{KeyKey.String(key), OutcomeKey.String(outcome), DirectionKey.String(direction)}
	})...)
}
