package otelsession

import (
	"errors"
	"fmt"
)

// Errors about session keys and values. This is the one set: package
// propagation and every transport return these same values (propagation
// re-exports some under its own names), so errors.Is gives the same answer
// whether a value was refused at Bind or at a receiving edge.
//
// Functions that return a context cannot fail; when one meets a value it
// cannot bind, it binds the safe alternative documented on it and reports the
// reason to otel.Handle (the global OTel error handler), wrapping one of these
// values. [Session.Validate] returns the same errors before anything is bound.
var (
	// ErrInvalidValue: a value holds a control character (C0, DEL; NUL is
	// the wire form of Cleared), bytes that are not valid UTF-8, or U+FFFD
	// (what a decoder leaves of such bytes), or is longer than its key's
	// limit (then the error also wraps ErrValueTooLong). Every edge refuses
	// the same values Bind refuses.
	ErrInvalidValue = errors.New("invalid session value")
	// ErrValueTooLong: a value is longer than its key's limit ([Spec.MaxLen]).
	// It wraps ErrInvalidValue.
	ErrValueTooLong = fmt.Errorf("session value too long: %w", ErrInvalidValue)
	// ErrValueTruncated: a display value (chat or user name) was longer than
	// its limit and was cut at a UTF-8 boundary; the session was kept. Not a
	// refusal.
	ErrValueTruncated = errors.New("session display value truncated")
	// ErrValueDropped: a display value held a character no edge accepts and
	// was bound Cleared; the session was kept. Not a refusal.
	ErrValueDropped = errors.New("session display value dropped")
	// ErrLocalField: a field that never leaves a process (UI session id,
	// browser control, working directory) arrived from the network.
	ErrLocalField = errors.New("local session field received from a peer")
	// ErrUnknownSessionKey: a member in the session namespace that is not a
	// session key in its canonical spelling: a field this version does not
	// know, a typo, or another spelling of a known key (upper case,
	// percent-encoded) that an SDK decoding keys would turn into one.
	ErrUnknownSessionKey = errors.New("unknown key in the session namespace")
	// ErrSessionTooLarge: the session's own members do not fit the W3C
	// baggage limits even with every other member dropped.
	ErrSessionTooLarge = errors.New("session does not fit the W3C baggage limits")
	// ErrForeignMembersDropped: members that are not session fields were
	// dropped from the baggage so that the whole session fits its limits.
	ErrForeignMembersDropped = errors.New("baggage members dropped to make room for the session")
	// ErrUnknownField: a Field value that is not one of the declared fields.
	ErrUnknownField = errors.New("unknown session field")
)
