package stockprop

import (
	"context"
	"reflect"
	"unsafe"

	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/internal/mention"
)

// Baggage reports whether prop is known (known): OpenTelemetry's Baggage or
// TraceContext propagator, or its composite of known ones, nested at most
// three deep; and, when known, whether it writes and reads the W3C baggage
// entry (w3c). A known propagator touches baggage nowhere else.
func Baggage(prop otelprop.TextMapPropagator) (w3c, known bool) {
	return stock(prop, 0)
}

func stock(prop otelprop.TextMapPropagator, depth int) (w3c, known bool) {
	switch prop.(type) {
	case otelprop.Baggage:
		return true, true
	case otelprop.TraceContext:
		return false, true
	}
	if prop == nil || depth > 3 || !compositeIsSlice || reflect.TypeOf(prop) != compositeType {
		return false, false
	}
	for _, p := range compositeParts(prop) {
		w, k := stock(p, depth+1)
		if !k {
			return false, false
		}
		w3c = w3c || w
	}
	return w3c, true
}

// ReadsOneLine reports whether prop's extraction from carrier reads
// baggage only through OpenTelemetry's W3C propagator, and that one reads
// the carrier's first "baggage" entry alone, through Get: prop is known
// and reads W3C baggage (Baggage), and carrier has no Values method.
func ReadsOneLine(prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier) bool {
	if _, ok := carrier.(otelprop.ValuesGetter); ok {
		return false
	}
	w3c, known := Baggage(prop)
	return w3c && known
}

// NoSession reports whether prop's extraction from carrier, whose Get of
// "baggage" returns line, holds no session member once the context's own
// session is Reset: prop reads the one line alone (ReadsOneLine), and the
// line names none (NamesNoSession). An empty line is no baggage at all.
//
// The inbound policy returns such an extraction as it is, without a check
// and without consulting the peer; a transport need not describe its peer
// for it. propagation's FuzzCheckReadsTheLineAsTheParserDoes holds the rule
// to the policy's full check.
func NoSession(prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, line string) bool {
	return NamesNoSession(line) && ReadsOneLine(prop, carrier)
}

// Extract is the inbound policy's whole step for a carrier NoSession holds
// for, line being the carrier's baggage line NoSession was given: the
// context's own session Reset (work never inherits the caller's), then
// prop's extraction, returned as it is (a simple line's baggage built by
// OpenTelemetry's constructors rather than its parser, with the same
// result, or served from the policy's cache of such lines). policy is the
// *propagation.Inbound whose cache serves the line, nil for none. Package
// propagation, which owns the policy, sets it when it loads, and its
// Inbound.Extract takes the same step for such a carrier; a transport that
// has asked NoSession itself (grpcsession's Edge, which then need not
// describe the caller) calls this instead of asking the policy to find it
// out again.
var Extract func(policy any, ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, line string) context.Context

// NamesNoSession reports whether line, a W3C baggage line, holds no
// session member once OpenTelemetry's W3C propagator parsed it alone: it is
// within otelsession.MaxBaggageBytes and names no session key in any
// spelling (mention.Mentioned).
func NamesNoSession(line string) bool {
	return len(line) <= otelsession.MaxBaggageBytes && !mention.Mentioned(line)
}

// compositeType is the type of OpenTelemetry's composite propagator, a
// slice of propagators it runs in turn.
var compositeType = reflect.TypeOf(otelprop.NewCompositeTextMapPropagator())

// compositeParts returns the propagators of a composite one (prop's type is
// compositeType, and compositeIsSlice), read in place, where reflect's Index
// and Interface would box them one by one, on every message.
func compositeParts(prop otelprop.TextMapPropagator) []otelprop.TextMapPropagator {
	v := reflect.ValueOf(prop)
	return unsafe.Slice((*otelprop.TextMapPropagator)(v.UnsafePointer()), v.Len())
}

// compositeIsSlice is whether compositeType is a slice of propagators, as
// compositeParts reads it. Should an OpenTelemetry release make it anything
// else, no composite is known: the policies then take their general paths
// (correct, slower), where reading it as a slice would panic.
var compositeIsSlice = compositeType.Kind() == reflect.Slice &&
	compositeType.Elem() == reflect.TypeFor[otelprop.TextMapPropagator]()

// ExtractExceptBaggage is prop's extraction from carrier without its W3C
// baggage propagator: what prop.Extract does to ctx but for replacing its
// baggage. prop must be known (Baggage reports known), else it returns ctx
// as it is. The inbound policy takes it with a baggage it has already,
// which it then puts into the context itself: the context answers every
// key as prop.Extract's would (the order in which its parts wrapped the
// context is not observable).
func ExtractExceptBaggage(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier) context.Context {
	return exceptBaggage(ctx, prop, carrier, 0)
}

func exceptBaggage(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, depth int) context.Context {
	switch prop.(type) {
	case otelprop.Baggage:
		return ctx
	case otelprop.TraceContext:
		return prop.Extract(ctx, carrier)
	}
	if prop == nil || depth > 3 || !compositeIsSlice || reflect.TypeOf(prop) != compositeType {
		return ctx
	}
	for _, p := range compositeParts(prop) {
		ctx = exceptBaggage(ctx, p, carrier, depth+1)
	}
	return ctx
}

// InjectLine is prop.Inject into carrier with line as what its W3C baggage
// propagator writes: the same line but for the order of its members (see
// sessionstate.WireLine), set as the propagator sets it (not at all when
// empty); prop's other parts inject as they do. prop must be known
// (Baggage reports known), else it writes nothing.
func InjectLine(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, line string) {
	injectLine(ctx, prop, carrier, line, 0)
}

func injectLine(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, line string, depth int) {
	switch prop.(type) {
	case otelprop.Baggage:
		if line != "" {
			carrier.Set("baggage", line)
		}
		return
	case otelprop.TraceContext:
		prop.Inject(ctx, carrier)
		return
	}
	if prop == nil || depth > 3 || !compositeIsSlice || reflect.TypeOf(prop) != compositeType {
		return
	}
	for _, p := range compositeParts(prop) {
		injectLine(ctx, p, carrier, line, depth+1)
	}
}
