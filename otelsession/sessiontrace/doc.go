// Package sessiontrace puts the session on spans and log records, so that one
// message can be followed through Jaeger or a log search by its thread, chat
// or message id.
//
// [SpanProcessor] is an OpenTelemetry SDK span processor: at span start it
// copies session fields of the span's parent context onto the span as
// attributes named by the fields' keys. By default a span carries the routing
// identity that finds one message's trace and tells where its reply goes
// (session.platform, session.scope_id, session.chat_id, session.thread_id,
// session.message_id), its conversation (session.key) and the user id as a
// keyed hash: every attribute costs the SDK time on every span, so the
// other fields are opt-in ([Redaction.SpanFields]). Baggage is immutable, so
// a processor builds the attributes of a baggage once and reuses them for
// every span started under it (a bounded memo per processor, keyed by the
// baggage's identity); local fields, kept beside the baggage, are read per
// span. [SpanProcessor.Annotate]
// does the same for a span that started before its session was decided (a
// gRPC server span, once the policy accepted the call's session).
// [LogHandler] wraps an slog.Handler and does the same for every record
// logged with a context, adding trace_id and span_id; [LogProcessor] does it
// for OpenTelemetry log records (sdk/log). It lives apart from
// package otelsession so that code that only reads sessions does not import
// the SDK.
//
// What an attribute looks like:
//
//   - a Set field: its value (or the redacted form, below);
//   - a Cleared field: the empty string, so "explicitly none" (a top-level
//     post with no thread) can be told from "never bound" in a search;
//     the wire marker (%00, a NUL byte) never appears;
//   - an Unset field: no attribute.
//
// With [Redaction.ConversationID] the session key is recorded a second time
// as gen_ai.conversation.id ([ConversationIDKey], the OpenTelemetry GenAI
// convention's conversation attribute), with the same redaction, so that
// tools that group spans by conversation and know nothing of session.* group
// sessionwire's spans too. It is off by default: the convention puts that
// attribute on GenAI operations, and session.key already holds the value. A
// Cleared or empty session key adds no conversation id.
//
// A [Redaction] policy decides per field: [Copy] the value, [Hash] it with a
// keyed HMAC-SHA256 (so equal values correlate but a dictionary of names
// cannot reverse them without the key), or [Drop] it. By default the user name
// and the browser-control principal are never copied in clear: they are
// hashed when a key is configured and dropped otherwise.
//
// Why not go.opentelemetry.io/contrib/processors/baggagecopy: it copies raw
// baggage members, so it would publish the Cleared marker as a NUL byte,
// cannot redact, and cannot see local fields, which are kept beside the
// baggage. It remains the right tool for the application's own, non-session
// baggage, and the two can be registered side by side.
package sessiontrace
