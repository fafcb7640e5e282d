// Package sessionstate carries one fact from otelsession to the propagation
// policies without a public API: that a context's baggage is, map for map,
// the baggage an otelsession writer built and validated, so an outbound
// policy need not read every session member back to check it again. It owns
// nothing else; otelsession sets the hook at start-up.
package sessionstate
