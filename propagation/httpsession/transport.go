package httpsession

import (
	"context"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/propagation"
)

// Transport is an http.RoundTripper that propagates the request context's
// trace context and baggage through an outbound policy: the session only to
// destinations the policy allows, signed when it signs. Its zero value sends
// no session anywhere (propagation's default) through http.DefaultTransport.
// It is safe for concurrent use once configured.
//
// With otelhttp, prefer a [ClientEdge]: it applies the same policy inside
// otelhttp's own injection, so the request is copied and the trace context
// written once rather than once in each layer.
type Transport struct {
	// Base sends the request; nil is http.DefaultTransport.
	Base http.RoundTripper
	// Propagator injects trace context and baggage; nil is
	// otel.GetTextMapPropagator() at request time.
	Propagator otelprop.TextMapPropagator
	// Outbound decides, for every request (redirects included, so a
	// redirect to a host it refuses does not carry the session there),
	// whether the session may go, and signs it. The policy sees
	// propagation.Dest{Transport: "http", Name: the URL's host, URL: the
	// URL}. nil is propagation's default: no session leaves. Typically
	//
	//	propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{".internal"}}))
	Outbound *propagation.Outbound
}

// RoundTrip sends a copy of req; req itself is never modified. The copy
// carries the context's trace context and baggage, with the session only
// when the policy allows the destination. Session members already in the
// request's baggage headers, under any spelling of the name, are removed
// first, whoever wrote them; for a refused destination the copy's context
// has no session either, so a transport in Base that injects again finds
// none.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(t.prepare(req))
}

// prepare returns the copy of req that RoundTrip sends.
func (t *Transport) prepare(req *http.Request) *http.Request {
	return injectCopy(req, t.Outbound, t.Propagator, nil)
}

// injectCopy returns a copy of req, its headers deep-copied, into which the
// policy wrote the trace context and baggage of req's context as dest(req)
// allows. The copy's context is what the policy sent from (for a withheld
// session, the context without it), passed through mark when mark is not
// nil.
func injectCopy(req *http.Request, out *propagation.Outbound, prop otelprop.TextMapPropagator, mark func(context.Context) context.Context) *http.Request {
	ctx := req.Context()
	cp := req.Clone(ctx)
	if cp.Header == nil {
		cp.Header = make(http.Header)
	}
	// The policy decides and strips once; the copy's context is what it
	// sent from, so that for a withheld session a RoundTripper in Base that
	// injects again finds none.
	sent, err := out.InjectContext(ctx, prop, otelprop.HeaderCarrier(cp.Header), destOf(req))
	if err != nil {
		// The request still goes, without the session or unsigned, as the
		// error says.
		otel.Handle(fmt.Errorf("httpsession: outgoing request: %w", err))
	}
	if mark != nil {
		sent = mark(sent)
	}
	if sent != ctx {
		cp = cp.WithContext(sent)
	}
	return cp
}

// destOf is what the outbound policy sees of req.
func destOf(req *http.Request) propagation.Dest {
	d := propagation.Dest{Transport: propagation.TransportHTTP, URL: req.URL}
	if req.URL != nil {
		d.Name = req.URL.Host
	}
	return d
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
