// Package interop holds no code. Its tests check that a session crosses a
// foreign W3C implementation unharmed: the OpenTelemetry JavaScript SDK
// (@opentelemetry/core W3CBaggagePropagator and W3CTraceContextPropagator, on
// Node.js), pinned in js/package.json and js/package-lock.json.
//
// The Go side injects and extracts with the stock otel-go propagators only,
// and reads a session from a peer through sessionwire's
// [github.com/sessionwire/sessionwire/propagation.Inbound]. The JavaScript
// side (js/propagate.cjs) extracts what it receives into a context and
// injects that context again, as any JavaScript service in the path would, or
// builds a session's baggage itself.
//
// The tests need Node.js 20.6 or later, with npm, on PATH (they are skipped
// without it, and fail under CI); they install the pinned packages of js/
// themselves with `npm ci` when js/node_modules does not hold them.
package interop
