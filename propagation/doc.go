// Package propagation is where a session crosses a boundary: the inbound trust
// policy ([Inbound]) applied wherever a session arrives from outside the
// process, and the egress policy ([Egress]) applied wherever one leaves it.
//
// The format is not ours: the session travels as ordinary W3C baggage,
// extracted and injected by the standard OpenTelemetry propagators, so a plain
// propagation.Baggage{} on the other side is enough to forward it. What this
// package adds is policy. Baggage is attacker-controlled input at every edge:
//
//   - Inbound, a unit of work starts from a context whose session is Reset,
//     then the carrier is extracted, then only registered session keys with
//     well-formed, length-bounded values are kept, and only when the peer is
//     trusted. By default no peer is trusted. Malformed, oversized,
//     duplicated, non-UTF-8, CRLF-bearing or local-field input yields an error
//     wrapping one of this package's Err values and a session that is wholly
//     Unset: never a panic, never a mix of two sessions. Other baggage members
//     pass as the propagator left them.
//   - Outbound, session members are sent only to destinations the [Egress]
//     allowlist names; every other destination gets the request without them.
//
// Each transport lives in its own sub-package, so a program imports only what
// it uses: httpsession (server handler and client transport), natssession
// (NATS core and JetStream headers), execsession (child-process
// environments), kafkasession and amqpsession (record and table carriers).
package propagation
