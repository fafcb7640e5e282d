// Package httpsession carries a session across HTTP: a server-side [Handler]
// that applies the inbound trust policy to every request, and on the client
// a [ClientEdge] (with otelhttp) or a [Transport] (on its own) that sends
// session members only to the destinations an egress allowlist names.
//
// It owns the HTTP edge and nothing else. The policy itself (which peers are
// trusted, which input is refused, which hosts may receive a session) lives in
// package propagation ([propagation.Inbound], [propagation.Egress]); the
// session model lives in package otelsession. The wire format is ordinary W3C
// baggage, so a plain OpenTelemetry setup on the other side is enough to
// receive and forward a session.
//
// # Server
//
//	policy := propagation.NewInbound(propagation.TrustLoopback())
//	http.Handle("/", httpsession.Handler(app, httpsession.WithInbound(policy)))
//
// Every request starts with an Unset session (it never inherits a session
// bound in the server's base context). The baggage of the request is then
// extracted, and its session is kept only when it is well formed and the peer
// is trusted. A refused session never fails the request: the handler runs with
// the session Unset, the policy counts the refusal, and [WithOnError] sees it.
// By default no peer is trusted. To accept signed sessions from peers the
// policy does not trust, give it a verifier:
//
//	policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
//
// HTTP has no message id, so the signature is bound to no request: within
// the verifier's maximum age, a captured signed session can be replayed onto
// another request (see SECURITY.md).
//
// # Client
//
// With otelhttp, the client is a [ClientEdge]: its propagator runs the
// outbound policy inside otelhttp's own injection, and its Transport,
// around otelhttp's, names each request's destination for it:
//
//	edge := httpsession.NewClientEdge(httpsession.WithOutbound(propagation.NewOutbound(
//		propagation.AllowURLs(propagation.Egress{Hosts: []string{".internal"}}),
//		propagation.WithSigner(signer)))) // the signer is optional
//	client := &http.Client{Transport: edge.Transport(otelhttp.NewTransport(http.DefaultTransport,
//		otelhttp.WithPropagators(edge.Propagator())))}
//
// Without otelhttp, [Transport] does the same on its own:
//
//	client := &http.Client{Transport: &httpsession.Transport{Outbound: outbound}}
//
// Every request goes through the outbound policy (propagation.Outbound), the
// same one every transport uses. A request to a host it allows carries trace
// context and all baggage, the session included (signed when the policy
// signs). Any other request carries trace context and the baggage members
// that are not the session's, but no session member. Session members other
// code already wrote into the request's baggage headers, in any spelling of
// the header name (Baggage, baggage, BAGGAGE, several lines), are removed
// before injection whatever the destination: a session leaves only as the
// policy writes it. http.Client asks the RoundTripper again for every
// redirect, so each URL is judged on its own. Without an outbound policy
// no session leaves.
//
// Why the ClientEdge: an otelhttp transport copies the request (a
// RoundTripper must not modify the request it was given) and writes
// traceparent; a Transport inside it, the configuration before the
// ClientEdge, copies the request's headers a second time and writes the
// trace context again. The ClientEdge's Transport hands otelhttp a shallow
// copy whose context names the destination, and its propagator writes the
// trace context and the policy's baggage into otelhttp's copy: one copy,
// one traceparent, one baggage line (BenchmarkClientStack). Each half is
// safe without the other: the propagator without the Transport sends no
// session ([ErrWithoutTransport]); the Transport around something that does
// not run the propagator writes the session itself, as Transport does (see
// [ClientEdge.Transport]).
//
// # Server, with otelhttp
//
// Handler composes with go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp
// in either order. The recommended configuration gives otelhttp
// [propagation.ExceptBaggage], so that it carries the trace context and
// leaves the baggage to Handler, which parses it once, as the policy
// decides:
//
//	except := otelhttp.WithPropagators(propagation.ExceptBaggage(nil))
//	otelhttp.NewHandler(httpsession.Handler(app, httpsession.WithInbound(policy),
//		httpsession.WithOnAccept(func(r *http.Request) { proc.Annotate(r.Context(), trace.SpanFromContext(r.Context())) })),
//		"op", except)
//
// otelhttp then starts the server span from the trace context, Handler
// running inside it decides the session, and [WithOnAccept] puts the
// accepted session on that span (proc is the program's
// sessiontrace.SpanProcessor); the handler's spans stay children of the
// server span. Given the program's full propagator instead, otelhttp parses
// the baggage a second time and starts its span from the session the client
// sent, before the policy judged it, so a span processor copies a session
// that may be refused onto the server span. BenchmarkServerStack measures
// both configurations beside otelhttp alone.
//
// # Transport with otelhttp
//
// A [Transport] also composes with an otelhttp transport in either order,
// as it did before the ClientEdge: otelhttp given
// [propagation.ExceptBaggage] around it writes the trace context and
// Transport, the last to touch the headers, writes the session where the
// policy allows it; given the full propagator, otelhttp writes the baggage
// too and Transport removes the session from it again. Both are safe, and
// cost more than a ClientEdge (BenchmarkClientStack).
//
// The reverse order is also safe: Handler rewrites the baggage header it
// hands on when it refuses a session, so an otelhttp handler behind it
// cannot extract the session again; Transport sends a context without the
// session, so an otelhttp transport behind it has none to inject.
//
// The default propagator of every piece is otel.GetTextMapPropagator(), read
// at request time, as otelhttp does. It is a no-op until the program calls
// otel.SetTextMapPropagator (with propagation.TraceContext{} and
// propagation.Baggage{}, typically); until then no session crosses HTTP.
package httpsession
