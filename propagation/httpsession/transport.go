package httpsession

import (
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/propagation"
)

// Transport is an http.RoundTripper that propagates the request context's
// trace context and baggage, and the session only to destinations Egress
// allows. Its zero value sends no session anywhere through
// http.DefaultTransport. It is safe for concurrent use once configured.
type Transport struct {
	// Base sends the request; nil is http.DefaultTransport.
	Base http.RoundTripper
	// Propagator injects trace context and baggage; nil is
	// otel.GetTextMapPropagator() at request time.
	Propagator otelprop.TextMapPropagator
	// Egress names the destinations that may receive the session. It is
	// checked for every request, redirects included, so a redirect to a host
	// outside the list does not carry the session there.
	Egress propagation.Egress
}

// RoundTrip sends a copy of req; req itself is never modified. For a
// destination Egress allows, the copy carries the context's trace context and
// baggage. For any other, the copy's context has no session (so a transport in
// Base that injects again finds none) and its baggage header keeps only
// members that are not session fields, whoever wrote them.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(t.prepare(req))
}

// prepare returns the copy of req that RoundTrip sends.
func (t *Transport) prepare(req *http.Request) *http.Request {
	prop := t.Propagator
	if prop == nil {
		prop = otel.GetTextMapPropagator()
	}
	ctx := req.Context()
	allowed := t.Egress.Allows(req.URL)
	if !allowed {
		ctx = propagation.WithoutSession(ctx)
	}
	out := req.Clone(ctx)
	if out.Header == nil {
		out.Header = make(http.Header)
	}
	prop.Inject(ctx, otelprop.HeaderCarrier(out.Header))
	if !allowed {
		if err := propagation.StripSessionHeader(out.Header); err != nil {
			// The unreadable header line was dropped; the request still goes.
			otel.Handle(fmt.Errorf("httpsession: outgoing request: %w", err))
		}
	}
	return out
}

// CloseIdleConnections closes the idle connections of Base when it can, so
// that http.Client.CloseIdleConnections reaches through Transport.
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
