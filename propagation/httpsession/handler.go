package httpsession

import (
	"net/http"
	"net/netip"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/mention"
	"github.com/sessionwire/sessionwire/propagation/internal/sessionevent"
)

// Option configures [Handler] or a [ClientEdge]. Server options are ignored
// by the client and the other way round, so one list can configure both
// ends of a service that also calls others.
type Option struct{ apply func(*config) }

// config is what Options set, for either end.
type config struct {
	prop     otelprop.TextMapPropagator
	inbound  *propagation.Inbound
	onError  func(*http.Request, error)
	onAccept func(*http.Request)
	outbound *propagation.Outbound
}

// WithPropagator sets the propagator that extracts trace context and baggage
// from requests ([Handler]) or injects them ([ClientEdge]). The default, nil,
// is otel.GetTextMapPropagator() at request time.
func WithPropagator(p otelprop.TextMapPropagator) Option {
	return Option{func(c *config) { c.prop = p }}
}

// WithInbound sets the trust policy applied to every request. The default,
// nil, is a policy of its own that trusts no peer
// (propagation.NewInbound(nil)). Pass one to choose the trusted peers and to
// read its Counts.
func WithInbound(p *propagation.Inbound) Option {
	return Option{func(c *config) { c.inbound = p }}
}

// WithOnError sets a function called, before the wrapped handler runs, for
// each request whose session the policy refused as malformed or for a
// signature that failed (see propagation.WithVerifier). err wraps one of
// propagation's Err values; it names the field, never the value. fn must not
// write to the response: the request is served as usual.
func WithOnError(fn func(r *http.Request, err error)) Option {
	return Option{func(c *config) { c.onError = fn }}
}

// WithOnAccept sets a function called, before the wrapped handler runs, with
// the request (its context carrying the session) of every request whose
// session the policy accepted. fn must not write to the response.
//
// Its use is the server span. otelhttp.NewHandler in front of Handler starts
// that span before the policy runs, from the headers as they arrived: given
// [propagation.ExceptBaggage], the span starts without a session; given the
// full propagator, a span processor that copies the session onto spans
// (sessiontrace) copies the one the client sent, accepted or not. The
// accepted session is known only here:
//
//	proc := sessiontrace.NewSpanProcessor(redaction) // also registered with the tracer provider
//	httpsession.WithOnAccept(func(r *http.Request) { proc.Annotate(r.Context(), trace.SpanFromContext(r.Context())) })
func WithOnAccept(fn func(r *http.Request)) Option {
	return Option{func(c *config) { c.onAccept = fn }}
}

type handler struct {
	next http.Handler
	config
}

// Handler returns a handler that serves next with the request's context
// carrying the session the inbound policy accepted, and nothing else: the
// session of the server's base context is never inherited, and a session
// from an untrusted peer or refused as malformed is Unset. A refused session
// never fails the request.
//
// The peer the policy judges is the request's remote address (r.RemoteAddr,
// the address of the TCP connection, never a forwarding header) with r.Host
// as its name; the client chooses the Host header, so a TrustFunc must not
// rely on the name alone.
//
// When the headers held session members that were not accepted, next
// receives a request whose baggage header is re-encoded from its context, so
// code behind Handler that extracts the header again (otelhttp.NewHandler, a
// proxy forwarding it) cannot revive the refused session. A span already
// started for the request in front of Handler (by otelhttp.NewHandler) stays
// the current span. A nil next is http.DefaultServeMux, as in http.Server.
func Handler(next http.Handler, opts ...Option) http.Handler {
	if next == nil {
		next = http.DefaultServeMux
	}
	h := &handler{next: next}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&h.config)
		}
	}
	if h.inbound == nil {
		h.inbound = propagation.NewInbound(nil)
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	prop := h.prop
	if prop == nil {
		prop = otel.GetTextMapPropagator()
	}
	peer := propagation.Peer{Transport: "http", Name: r.Host}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		peer.Addr = ap.Addr()
	}
	ctx, err := h.inbound.Extract(r.Context(), prop, otelprop.HeaderCarrier(r.Header), peer)
	// Instrumentation in front of Handler started its server span from these
	// same headers. Extracting them again made their remote parent current;
	// put the server span back so the handler's spans stay its children.
	if span := trace.SpanFromContext(r.Context()); span.SpanContext().IsValid() && !span.SpanContext().IsRemote() {
		ctx = trace.ContextWithSpan(ctx, span)
	}
	r = r.WithContext(ctx)
	accepted := propagation.HasSession(baggage.FromContext(ctx))
	// No session came through although the headers name one: refused, or
	// stripped from an untrusted peer.
	lost := !accepted && mentionsSession(r.Header)
	// The request's span, when instrumentation in front started one, says
	// why the session was refused or stripped.
	if span := trace.SpanFromContext(ctx); err != nil {
		sessionevent.Refused(span, err)
	} else if lost {
		sessionevent.StrippedIfOffered(span, baggage.FromContext(ctx), r.Header.Values("baggage"), peer)
	}
	if lost {
		r.Header = r.Header.Clone()
		for k := range r.Header {
			if strings.EqualFold(k, "baggage") {
				delete(r.Header, k)
			}
		}
		otelprop.Baggage{}.Inject(ctx, otelprop.HeaderCarrier(r.Header))
	}
	if err != nil && h.onError != nil {
		h.onError(r, err)
	}
	if accepted && h.onAccept != nil {
		h.onAccept(r)
	}
	h.next.ServeHTTP(w, r)
}

// mentionsSession reports whether a baggage header line of h may hold a
// session member (mention.Mentioned), under any spelling of the
// header's name.
func mentionsSession(h http.Header) bool {
	for k, vs := range h {
		if !strings.EqualFold(k, "baggage") {
			continue
		}
		for _, v := range vs {
			if mention.Mentioned(v) {
				return true
			}
		}
	}
	return false
}
