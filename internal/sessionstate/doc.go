// Package sessionstate carries two facts from otelsession to the propagation
// policies without a public API: that a context's baggage is, map for map,
// the baggage an otelsession writer built and validated, so an outbound
// policy need not read every session member back to check it again; and
// whether a context holds any session state beside its baggage, so an
// inbound policy can tell in one look-up whether there is anything to Reset.
// It also owns telling two baggages apart by their map (BaggageID), for
// whoever keeps what it built from one. It owns nothing else; otelsession
// sets the hooks at start-up.
package sessionstate
