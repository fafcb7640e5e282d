package httpsession

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/propagation"
)

// ClientEdge is a program's HTTP client edge for sessions: a propagator for
// otelhttp's transport and a RoundTripper around that transport, built from
// one list of Options. Give otelhttp the propagator and wrap otelhttp's
// transport:
//
//	edge := httpsession.NewClientEdge(httpsession.WithOutbound(outbound))
//	client := &http.Client{Transport: edge.Transport(otelhttp.NewTransport(http.DefaultTransport,
//		otelhttp.WithPropagators(edge.Propagator())))}
//
// The outbound policy then runs inside otelhttp's own propagation step, into
// otelhttp's own copy of the request: the request is copied once, and
// traceparent and the baggage are written once. (otelhttp given
// [propagation.ExceptBaggage] around a [Transport] copies the request twice,
// once in each layer, and writes traceparent twice.) See
// [ClientEdge.Transport] and [ClientEdge.Propagator] for what each half
// does, and what happens when one runs without the other.
//
// A ClientEdge is safe for concurrent use and serves any number of
// clients. It has no server half: on the server, otelhttp given
// [propagation.ExceptBaggage] around [Handler] already parses the baggage
// once.
type ClientEdge struct {
	c      config
	except otelprop.TextMapPropagator // c.prop without baggage, built once
	n      struct{ withoutTransport, withoutPropagator atomic.Uint64 }
}

// WithOutbound sets the client's outbound policy, applied to every request
// of a [ClientEdge] (redirects included, each to its own URL). The policy
// sees propagation.Dest{Transport: "http", Name: the URL's host, URL: the
// URL}. The default, nil, is propagation's: no session leaves. Typically
//
//	propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{".internal"}}))
func WithOutbound(o *propagation.Outbound) Option {
	return Option{func(c *config) { c.outbound = o }}
}

// NewClientEdge returns the ClientEdge configured by opts: [WithOutbound]
// and [WithPropagator]; the server's options are ignored.
func NewClientEdge(opts ...Option) *ClientEdge {
	e := &ClientEdge{}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&e.c)
		}
	}
	e.except = propagation.ExceptBaggage(e.c.prop)
	return e
}

// ClientEdgeCounts is a snapshot of what went wrong in a [ClientEdge]'s
// configuration; both stay zero when it is configured as documented.
type ClientEdgeCounts struct {
	// WithoutTransport counts injections of the Edge's propagator for a
	// request that did not pass its Transport, whose context held a session:
	// it was not sent ([ErrWithoutTransport]).
	WithoutTransport uint64
	// WithoutPropagator counts requests the Edge's Transport handed on
	// relying on its propagator, which did not run for them
	// ([ErrWithoutPropagator]).
	WithoutPropagator uint64
}

// Counts returns what went wrong so far.
func (e *ClientEdge) Counts() ClientEdgeCounts {
	return ClientEdgeCounts{WithoutTransport: e.n.withoutTransport.Load(), WithoutPropagator: e.n.withoutPropagator.Load()}
}

// ErrWithoutTransport is what the Edge's propagator reports to otel.Handle
// when it injects for a request that did not go through the same Edge's
// Transport: it cannot see the request's URL, so it sends no session.
var ErrWithoutTransport = errors.New("the request did not pass the ClientEdge's Transport (wrap otelhttp's transport in edge.Transport), so its destination is unknown; the session was not sent")

// ErrWithoutPropagator is what the Edge's Transport reports to otel.Handle
// when a request it handed on for its propagator to inject went out without
// the propagator running (an otelhttp Filter skipped the request, or the
// RoundTripper it wraps does not run the propagator on every request).
var ErrWithoutPropagator = errors.New("the RoundTripper given to ClientEdge.Transport sent a request without running the edge's propagator (an otelhttp Filter skipped it?), so that request left without its session; this Transport now writes the session itself")

// Transport returns a RoundTripper that names each request's destination
// for the Edge's propagator and hands the request to next, which must be
// otelhttp's transport given [ClientEdge.Propagator]:
//
//	edge.Transport(otelhttp.NewTransport(base, otelhttp.WithPropagators(edge.Propagator())))
//
// It does not copy the request's headers: it hands on a shallow copy whose
// context names the destination (req.WithContext), and otelhttp's copy is
// the one the policy writes into. The caller's request is never modified.
//
// It learns whether next runs the propagator. Until it has seen the
// propagator run for a request, it writes the session itself, as
// [Transport] does (its own copy of the request, the policy deciding by its
// URL, session members already in the request's headers removed), and the
// propagator then writes only the trace context; so with next being a
// plain RoundTripper, or otelhttp given another propagator, the session
// still leaves only as the policy allows, never unchecked. Once it has seen
// the propagator run, it relies on it. A request whose headers already
// hold baggage that may name a session member is always written by the
// Transport itself, so that such headers never leave unchecked even when
// next skips the propagator. Should a request handed on to the propagator
// go out without it running (an otelhttp Filter that rejects some
// requests), that request leaves without its session: the Transport
// reports [ErrWithoutPropagator] to otel.Handle, counts it, and writes the
// session itself for every later request.
//
// Redirects: http.Client asks the Transport again for each redirected
// request, so the policy judges every URL, and a redirect to a host it
// refuses does not carry the session there.
func (e *ClientEdge) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &edgeTransport{e: e, next: next}
}

// Propagator returns the propagator to give the otelhttp transport that
// [ClientEdge.Transport] wraps, otelhttp.WithPropagators(edge.Propagator()),
// as its whole propagator. It carries the trace context and the baggage
// with the propagator of [WithPropagator] (by default
// otel.GetTextMapPropagator(), read per request), and applies the outbound
// policy as it injects: session members otelhttp's copy of the request
// already holds are removed, the session goes only where the policy allows
// the request's URL, signed when it signs (appended to the baggage line the
// W3C propagator writes).
//
// A baggage propagator composed after it, or an injecting RoundTripper
// behind otelhttp, would write the context's baggage again, unchecked: give
// otelhttp this propagator alone, and put nothing that injects behind it.
//
// Inject for a request that did not pass the Edge's Transport fails
// closed: the trace context and the application's own baggage members are
// written, no session member is, and [ErrWithoutTransport] is reported to
// otel.Handle and counted ([ClientEdge.Counts]).
//
// Extract carries the trace context only, as [propagation.ExceptBaggage]
// does: a server's baggage is [Handler]'s to judge.
func (e *ClientEdge) Propagator() otelprop.TextMapPropagator { return edgePropagator{e} }

// edgeTransport is what ClientEdge.Transport returns.
type edgeTransport struct {
	e     *ClientEdge
	next  http.RoundTripper
	state atomic.Int32
}

// The states of an edgeTransport.
const (
	learning = iota // not yet seen the propagator run: write the session
	paired          // seen it run: let it write the session
	fallback        // seen it not run on a paired request: write the session, for good
)

// edgeRequest is what the Edge's Transport tells its propagator about one
// request, as the context of the request it hands on (one allocation for
// both).
type edgeRequest struct {
	context.Context
	e       *ClientEdge
	d       propagation.Dest
	written bool         // the Transport wrote the baggage: inject the trace context only
	state   atomic.Int32 // pending, injected, done
}

// The states of an edgeRequest: the propagator claims a pending request
// once; a request whose RoundTrip returned is never claimed again, so a
// context kept from it (resp.Request.Context()) names no destination.
const (
	pending = iota
	injected
	done
)

type edgeRequestKey struct{}

func (r *edgeRequest) Value(key any) any {
	if key == (edgeRequestKey{}) {
		return r
	}
	return r.Context.Value(key)
}

func (t *edgeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	e := t.e
	st := t.state.Load()
	if st == paired && !mentionsSession(req.Header) {
		r := &edgeRequest{Context: req.Context(), e: e, d: destOf(req)}
		resp, err := t.next.RoundTrip(req.WithContext(r))
		if !r.state.CompareAndSwap(pending, done) {
			return resp, err
		}
		// The propagator did not run: this request left with no session.
		if t.state.CompareAndSwap(paired, fallback) || propagation.HasSession(baggage.FromContext(req.Context())) {
			e.n.withoutPropagator.Add(1)
			otel.Handle(fmt.Errorf("httpsession: outgoing request to %s: %w", r.d.Name, ErrWithoutPropagator))
		}
		return resp, err
	}
	var r *edgeRequest
	cp := injectCopy(req, e.c.outbound, e.c.prop, func(ctx context.Context) context.Context {
		r = &edgeRequest{Context: ctx, e: e, written: true}
		return r
	})
	resp, err := t.next.RoundTrip(cp)
	if !r.state.CompareAndSwap(pending, done) && st == learning {
		t.state.CompareAndSwap(learning, paired)
	}
	return resp, err
}

// CloseIdleConnections closes the idle connections of next when it can, so
// that http.Client.CloseIdleConnections reaches through.
func (t *edgeTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type edgePropagator struct{ e *ClientEdge }

func (p edgePropagator) prop() otelprop.TextMapPropagator {
	if p.e.c.prop != nil {
		return p.e.c.prop
	}
	return otel.GetTextMapPropagator()
}

func (p edgePropagator) Fields() []string { return p.prop().Fields() }

func (p edgePropagator) Extract(ctx context.Context, carrier otelprop.TextMapCarrier) context.Context {
	return p.e.except.Extract(ctx, carrier)
}

func (p edgePropagator) Inject(ctx context.Context, carrier otelprop.TextMapCarrier) {
	e := p.e
	r, _ := ctx.Value(edgeRequestKey{}).(*edgeRequest)
	if r == nil || r.e != e || !r.state.CompareAndSwap(pending, injected) {
		e.injectWithoutDest(ctx, carrier)
		return
	}
	if r.written {
		e.except.Inject(ctx, carrier)
		return
	}
	if err := e.c.outbound.Inject(ctx, e.c.prop, carrier, r.d); err != nil {
		otel.Handle(fmt.Errorf("httpsession: outgoing request: %w", err))
	}
}

// injectWithoutDest fails closed: no destination, no session.
func (e *ClientEdge) injectWithoutDest(ctx context.Context, carrier otelprop.TextMapCarrier) {
	if propagation.HasSession(baggage.FromContext(ctx)) {
		ctx = propagation.WithoutSession(ctx)
		e.n.withoutTransport.Add(1)
		otel.Handle(fmt.Errorf("httpsession: propagator: %w", ErrWithoutTransport))
	}
	// Inject still removes session members the carrier already holds, and
	// never sends a stray member of the session namespace.
	if err := e.c.outbound.Inject(ctx, e.c.prop, carrier, propagation.Dest{Transport: propagation.TransportHTTP}); err != nil {
		otel.Handle(fmt.Errorf("httpsession: propagator: %w", err))
	}
}
