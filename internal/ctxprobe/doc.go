// Package ctxprobe learns the context key under which a library keeps a
// value it exports no way to read in place (OpenTelemetry's baggage, gRPC's
// incoming metadata), by watching what the library's own accessor asks a
// context for. It owns nothing else: each caller checks that the key it
// learnt finds what it expects, and falls back to the library's accessor
// when it does not.
package ctxprobe
