// Package sessionstate carries one fact from otelsession to the propagation
// policies without a public API: that a context's baggage is, map for map,
// the baggage an otelsession writer built and validated, so an outbound
// policy need not read every session member back to check it again. It owns
// nothing else; otelsession sets the hook at start-up.
package sessionstate

import "context"

// Checked reports, when ok, that ctx's baggage is exactly what an
// otelsession writer built from values it validated (no refused value, no
// stray key in the session namespace, no signature), and whether that
// baggage holds any session member (present). ok false means nothing is
// known: the caller checks the baggage itself. Set by otelsession's init.
var Checked = func(context.Context) (present, ok bool) { return false, false }
