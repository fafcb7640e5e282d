// Package grpcsession carries a session across gRPC calls: server
// interceptors that apply the inbound trust policy to every unary call and
// every stream, client interceptors that send the session only to the
// services an outbound policy names, and (through an [Edge]) a propagator
// for otelgrpc that runs those policies inside otelgrpc's own propagation
// step.
//
// It owns the gRPC edge and nothing else. The policy itself (which peers are
// trusted, which input is refused, where a session may go, signing) lives in
// package propagation ([propagation.Inbound], [propagation.Outbound]), the
// same two every transport of this module uses; the session model lives in
// package otelsession. The wire format is ordinary W3C baggage in the
// "baggage" metadata entry, so otelgrpc on the other side is enough to
// receive and forward a session.
//
// # With otelgrpc: an Edge
//
// The recommended configuration: one [Edge] per program, its propagator
// given to otelgrpc, its interceptors to gRPC, on both sides.
//
//	edge := grpcsession.New(
//		grpcsession.WithInbound(propagation.NewInbound(grpcsession.TrustSANs("spiffe://prod/gateway"))),
//		grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{
//			Prefixes: []string{"grpc://notify.internal:443/notify.v1.Notify/"}}))))
//	tracing := otelgrpc.WithPropagators(edge.Propagator())
//	srv := grpc.NewServer(append(edge.ServerOptions(),
//		grpc.StatsHandler(otelgrpc.NewServerHandler(tracing)), grpc.Creds(serverTLS))...)
//	conn, err := grpc.NewClient("notify.internal:443", append(edge.DialOptions(),
//		grpc.WithStatsHandler(otelgrpc.NewClientHandler(tracing)), grpc.WithTransportCredentials(clientTLS))...)
//
// The policy then runs where otelgrpc extracts and injects: each call's
// metadata is copied once, its trace context and baggage are parsed
// (server) or written (client) once, and otelgrpc's server span starts from
// the session the policy accepted, so a span processor that copies the
// session onto spans (sessiontrace) puts the accepted one there, and never
// a refused one. [Edge.Propagator] says what each half does without the
// other: a server interceptor without a verdict judges the call itself; a
// client interceptor carries the session itself on a connection whose
// otelgrpc it has not seen run the propagator; the propagator without the
// client interceptor sends no session. None of these sends a session the
// policy did not allow or gives a handler's context one it did not accept,
// provided otelgrpc is given the propagator as its whole propagator (see
// [Edge.Propagator]).
//
// The sections below describe what is judged and sent; they hold for the
// Edge and for the interceptors on their own (the package-level
// [ServerOptions] and [DialOptions], with otelgrpc given [ExceptBaggage],
// the configuration before the Edge, still supported).
//
// # Server
//
//	policy := propagation.NewInbound(grpcsession.TrustSANs("spiffe://prod/gateway"),
//		propagation.WithVerifier(verifier)) // the verifier is optional
//	srv := grpc.NewServer(append(grpcsession.ServerOptions(grpcsession.WithInbound(policy)),
//		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithPropagators(grpcsession.ExceptBaggage(nil)))))...)
//
// Every call starts with an Unset session (it never inherits one from the
// server's base context). The "baggage" entries of the incoming metadata
// (several entries are several lines) are extracted, and the session is kept
// only when it is well formed and the peer is trusted or signed it. The peer
// is the connection's address and, when the connection is TLS with a
// verified client certificate, the certificate's first URI SAN or else DNS
// SAN as its name; without one its name is the :authority the client
// addressed, which the client chooses, so trust by certificate with
// [TrustSANs], which reads the verified certificate itself. A "baggage-bin"
// entry (no W3C format is binary) refuses the call's baggage: the call runs
// as if it had none, and [WithOnError] sees an error wrapping
// propagation.ErrMalformedMember (the policy's Counts do not, as its
// Extract never sees that baggage).
//
// A refused session never fails the call: the handler runs with the session
// Unset, the policy counts the refusal, [WithOnError] sees it, and the
// incoming metadata the handler can read is re-encoded so that nothing
// behind the interceptor can extract the refused session again. A handler
// without an accepted session reads the baggage lines that were judged,
// also when hand-built metadata spells the key twice ("Baggage" beside
// "baggage", of which each of gRPC's own reads keeps either); so does
// every handler behind the interceptors alone. (Metadata from the wire
// never spells a key twice: HTTP/2 refuses upper-case names.)
// [WithUnauthenticated] instead fails every call without an accepted session
// with codes.Unauthenticated, for services that must not run without one.
// A stream is judged once, when it opens: its Context, and so every message
// the handler receives and sends for as long as the stream lives, carries
// the session of the call.
//
// # Client
//
//	out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{
//		Prefixes: []string{"grpc://notify.internal:443/notify.v1.Notify/"}}),
//		propagation.WithSigner(signer)) // the signer is optional
//	conn, err := grpc.NewClient("notify.internal:443", append(grpcsession.DialOptions(grpcsession.WithOutbound(out)),
//		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(grpcsession.ExceptBaggage(nil)))),
//		grpc.WithTransportCredentials(creds))...)
//
// The policy sees the call as propagation.Dest{Transport: "grpc", Name: the
// target's host, URL: grpc://<target authority>/<package.Service>/<Method>}:
// AllowURLs rules name a service or a method, AllowNames(TransportGRPC, …)
// rules name hosts. Session members other code already wrote into the
// outgoing metadata (metadata.NewOutgoingContext, AppendToOutgoingContext,
// "Baggage" in a hand-built MD, percent-encoded or upper-case session keys)
// are removed before injection whatever the destination, and so is any
// baggage-bin entry: a session leaves only as the policy writes it. The
// session is signed per call. The default, without WithOutbound, sends no
// session anywhere.
//
// # Interceptors beside otelgrpc, without an Edge
//
// otelgrpc.NewServerHandler and otelgrpc.NewClientHandler are stats
// handlers, and gRPC calls every stats handler around the interceptors,
// whatever the order of the options. On the server, otelgrpc extracts the
// metadata and starts the server span; the interceptor then decides the
// session and keeps that span current, so the handler's spans stay its
// children. (When the context already holds a span context, a stats
// handler has taken the trace context, and the interceptor, given the
// W3C propagators, extracts the baggage alone; without one, it extracts
// the trace context too.) On the client, otelgrpc injects the baggage of
// the context again after the interceptor ran; the interceptor hands on a
// context whose session is exactly the one it wrote (none for a refused
// destination, the signed one when it signs), so otelgrpc writes the same.
//
// Both otelgrpc and the interceptors then extract (and inject) the baggage,
// each once per call. Giving otelgrpc [ExceptBaggage] on both sides,
//
//	otelgrpc.NewServerHandler(otelgrpc.WithPropagators(grpcsession.ExceptBaggage(nil)))
//	otelgrpc.NewClientHandler(otelgrpc.WithPropagators(grpcsession.ExceptBaggage(nil)))
//
// leaves the baggage to the interceptors and saves the second pass (see
// BenchmarkUnary and the README); spans are parented as before, and the
// program's other propagators keep working. The interceptors still run as
// a step of their own, after otelgrpc's: the client writes the trace
// context twice, which an Edge avoids. (The server reads the call's
// metadata in place when its keys are lower-case, as gRPC delivers them,
// and copies it only to take a refused session out of what the handler
// reads.)
//
// otelgrpc starts the server span before the interceptor decides: given
// ExceptBaggage it starts without a session, given the full propagator a
// span processor that copies the session onto spans (sessiontrace) copies
// the one the client sent, accepted or not. [WithOnAccept] runs when a
// session was accepted, with the server span current: with
// sessiontrace's SpanProcessor.Annotate it puts the accepted session, and
// only that, on the server span. An Edge needs none of this: otelgrpc's
// server span starts from the accepted session.
//
// The default propagator is otel.GetTextMapPropagator(), read per call, as
// otelgrpc does. It is a no-op until the program calls
// otel.SetTextMapPropagator (with propagation.TraceContext{} and
// propagation.Baggage{}, typically); until then no session crosses gRPC.
package grpcsession
