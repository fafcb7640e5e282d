package otelsession

import "errors"

// Errors reported by this package. Functions that return a context cannot
// fail; when one meets a value it cannot bind, it binds the safe alternative
// documented on it and reports the reason to otel.Handle (the global OTel error
// handler), wrapping one of these values so a handler can tell them apart with
// errors.Is. [Session.Validate] returns the same errors before anything is
// bound.
var (
	// ErrInvalidValue: a value is not valid UTF-8 or holds a NUL byte (no
	// environment variable can hold one, and NUL is the wire form of Cleared).
	ErrInvalidValue = errors.New("invalid session value")
	// ErrValueTooLong: a value is longer than MaxValueBytes.
	ErrValueTooLong = errors.New("session value too long")
	// ErrSessionTooLarge: the session's own members do not fit the W3C
	// baggage limits even with every other member dropped.
	ErrSessionTooLarge = errors.New("session does not fit the W3C baggage limits")
	// ErrForeignMembersDropped: members that are not session fields were
	// dropped from the baggage so that the whole session fits its limits.
	ErrForeignMembersDropped = errors.New("baggage members dropped to make room for the session")
	// ErrUnknownField: a Field value that is not one of the declared fields.
	ErrUnknownField = errors.New("unknown session field")
)
