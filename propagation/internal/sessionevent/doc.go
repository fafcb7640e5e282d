// Package sessionevent records on a span that an inbound boundary refused or
// stripped the session a message or request offered, and why, so that a
// trace shows where a conversation lost its session (sessionctl trace reads
// it). Only the refusal's reason is recorded: it names the field or the
// check that failed, never a value.
package sessionevent
