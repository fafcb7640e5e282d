package stockprop

import (
	"strings"
	"testing"

	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
)

// Baggage knows OpenTelemetry's own propagators and their composites,
// nested too, and nothing else; the composite's parts are read in place.
func TestBaggage(t *testing.T) {
	if !compositeIsSlice {
		t.Fatal("OpenTelemetry's composite propagator is no longer a slice of propagators: no composite is known, and the policies take their general paths")
	}
	tc, bag := otelprop.TraceContext{}, otelprop.Baggage{}
	comp := otelprop.NewCompositeTextMapPropagator
	for _, c := range []struct {
		name       string
		prop       otelprop.TextMapPropagator
		w3c, known bool
	}{
		{"nil", nil, false, false},
		{"Baggage", bag, true, true},
		{"TraceContext", tc, false, true},
		{"composite", comp(tc, bag), true, true},
		{"composite without Baggage", comp(tc), false, true},
		{"empty composite", comp(), false, true},
		{"nested", comp(tc, comp(bag)), true, true},
		{"too deep", comp(comp(comp(comp(comp(bag))))), false, false},
		{"another propagator", otelprop.TextMapPropagator(otherPropagator{}), false, false},
		{"composite with another", comp(tc, bag, otherPropagator{}), false, false},
		{"composite with nil", comp(bag, nil), false, false},
	} {
		if w3c, known := Baggage(c.prop); w3c != c.w3c || known != c.known {
			t.Errorf("%s: Baggage = %v, %v; want %v, %v", c.name, w3c, known, c.w3c, c.known)
		}
	}
}

type otherPropagator struct{ otelprop.Baggage }

// NoSession holds for the stock W3C propagator reading one line through Get
// that names no session key, and for nothing else.
func TestNoSession(t *testing.T) {
	comp := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	get := otelprop.MapCarrier{}       // Get only
	values := otelprop.HeaderCarrier{} // Values too: the propagator reads every line
	for _, c := range []struct {
		name    string
		prop    otelprop.TextMapPropagator
		carrier otelprop.TextMapCarrier
		line    string
		want    bool
	}{
		{"application baggage", comp, get, "app.tenant=t-42,app.plan=pro", true},
		{"no baggage", comp, get, "", true},
		{"a session key", comp, get, "app.x=1," + otelsession.KeyPrefix + "chat_id=c", false},
		{"a session key in capitals", comp, get, strings.ToUpper(otelsession.KeyPrefix) + "CHAT_ID=c", false},
		{"percent-encoded", comp, get, "app.x=%41", false},
		{"over the size limit", comp, get, "app.x=" + strings.Repeat("v", otelsession.MaxBaggageBytes), false},
		{"a carrier with Values", comp, values, "app.tenant=t-42", false},
		{"another propagator", otherPropagator{}, get, "app.tenant=t-42", false},
		{"no W3C baggage propagator", otelprop.TraceContext{}, get, "app.tenant=t-42", false},
	} {
		if got := NoSession(c.prop, c.carrier, c.line); got != c.want {
			t.Errorf("%s: NoSession = %v, want %v", c.name, got, c.want)
		}
	}
}
