package sessionstate

import "context"

// Checked reports, when ok, that ctx's baggage is exactly what an
// otelsession writer built from values it validated (no refused value, no
// stray key in the session namespace, no signature), and whether that
// baggage holds any session member (present). ok false means nothing is
// known: the caller checks the baggage itself. Set by otelsession's init.
var Checked = func(context.Context) (present, ok bool) { return false, false }

// HasLocal reports whether ctx holds session state that lives beside the
// baggage (local fields, the working directory, the delegated-child mark,
// the record of a checked baggage), whatever its values. Set by
// otelsession's init.
var HasLocal = func(context.Context) bool { return false }
