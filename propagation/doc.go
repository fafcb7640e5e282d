// Package propagation is where a session crosses a boundary: the inbound trust
// policy ([Inbound]) applied wherever a session arrives from outside the
// process, and its mirror, the outbound policy ([Outbound]), applied
// wherever one leaves it. Every transport (HTTP, NATS, Kafka, AMQP, child
// processes) calls the same two: [Inbound.Extract] and [Outbound.Inject].
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
//   - Outbound, whatever the carrier already holds loses its session
//     members (in any spelling of the baggage header), the session is
//     validated with the same value rule and sent only to destinations the
//     policy's [AllowFunc] allows, signed when it has a [Signer]. The default,
//     the same on every transport, is [AllowChildProcesses]: no session
//     reaches the network until the program names where it may go
//     ([AllowURLs], [AllowNames], [AllowAll]).
//
// What a session key is and what a valid value is come from one place, the
// wire-key table of package otelsession (otelsession.Specs,
// otelsession.ValidateValue, otelsession.OwnedKey): a value Bind accepts is
// accepted by every edge, and the session namespace is owned, so a member
// whose key decodes or case-folds into it (session%2Echat_id,
// SESSION.chat_id) is refused inbound and stripped outbound. The errors are
// otelsession's, re-exported here, so errors.Is agrees across packages.
// Both policies report their outcomes as OpenTelemetry metrics through the
// global MeterProvider: sessionwire.session.inbound (by transport, outcome
// and reason), sessionwire.session.outbound (by transport, outcome and
// signed), sessionwire.session.outbound.prewritten_removed and
// sessionwire.session.values (display values cut or dropped), beside the
// in-process [Inbound.Counts] and [Outbound.Counts].
//
// # Signed sessions
//
// Trusting a peer by its address stops at the edge of a network one
// controls. Beyond it, a gateway signs the session it binds ([Signer]) and
// the services that receive it verify the signature ([Verifier],
// [WithVerifier]): from a peer the policy does not trust, a session is then
// accepted only with a signature that verifies with a current key and a
// fresh issue time. The signature is one more baggage member,
// session.sig=v1.<key id>.<unix seconds>.<HMAC-SHA256, base64url>, computed
// over the session's remote members exactly as they travel (present, absent
// or Cleared), the key id, the issue time and what the transport binds it
// to ([Signer.SignFor], [Peer.MessageID]): a NATS message's subject, and
// its Nats-Msg-Id when it has one; a Kafka record's topic, and its message
// id when it has one; an AMQP message's exchange and routing key, and its
// MessageId when it has one; nothing for HTTP, gRPC and child processes,
// which share that empty binding. Changing, adding or removing a session
// member, or moving the signature to another message, subject, topic,
// exchange or routing key, or between a queue and anything else, breaks it;
// a signature made for an HTTP request verifies on a gRPC call or in a
// child's environment too. Members that are not the session's are not
// covered and change freely. A Verifier holds several keys, so keys rotate without downtime.
// See SECURITY.md at the repository root for the threat model.
//
// # The cost of a message
//
// Most of an inbound step is making the baggage line into a baggage. A
// simple line (members "key=value", without white space or properties, as
// sessionwire and most W3C implementations write them) is built by
// OpenTelemetry's own constructors, baggage.NewMemberRaw and baggage.New,
// rather than parsed by baggage.Parse, which costs more: the two return the
// same baggage for such a line (FuzzSimpleLineIsTheParsersBaggage holds
// them to each other), and any other line is OpenTelemetry's to parse.
//
// # A conversation's next message
//
// A consumer receives a conversation's session on every message, in a
// baggage line that differs from the last one's in the message id (and the
// signature) and in the order of its members. Each Inbound keeps a small
// cache of the lines it accepted whole ([WithCacheSize]): a later line with
// the same members but a new message id gets the baggage of the last one
// with the new id set by OpenTelemetry's SetMember, where OpenTelemetry
// would parse the whole line again, and the same context the full path
// returns; the raw scan, the signature or the peer, the counts and the
// metrics are those of every message ([Counts].Cached counts what it
// served). It keeps lines that name no session too (a call carrying only
// the application's own baggage): the same line again, byte for byte, gets
// the baggage built from it the last time ([Counts].CachedNoSession).
//
// # Beside other instrumentation
//
// Instrumentation that propagates on its own beside a session edge (otelhttp
// beside httpsession, otelgrpc beside grpcsession's interceptors) is given
// [ExceptBaggage]: it carries the trace context and leaves the baggage to
// the edge, so the session is parsed and written once, as the policy decides,
// and a server span never starts from a session the policy has not judged.
//
// Each transport lives in its own sub-package, so a program imports only what
// it uses: httpsession (server handler and client transport), grpcsession
// (server and client interceptors, and a propagator for otelgrpc), natssession
// (NATS core and JetStream headers), execsession (child-process
// environments), kafkasession and amqpsession (record and table carriers).
package propagation
