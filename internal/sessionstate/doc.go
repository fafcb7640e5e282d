// Package sessionstate carries facts from otelsession to the propagation
// policies, and back, without a public API: that a context's baggage is, map
// for map, the baggage an otelsession writer built and validated, so an
// outbound policy need not read every session member back to check it
// again (Checked); whether a context holds any session state beside its
// baggage, so an inbound policy can tell in one look-up whether there is
// anything to Reset (HasLocal); and, for any baggage whose builder noted
// one (an otelsession writer, an inbound policy that accepted it), the
// record of its session's values that a context holds beside it, which
// otelsession's reads take instead of looking each field up (Record,
// RecordOf; its values held as strings, Values, or as spans of the one
// baggage line an inbound policy read them from, Spans), and the table of
// the maps a record was made for, by which
// RecordOf knows at once that a baggage has none (Recorded; a map is known
// there by its address and the hash seed Go drew for it, so that a map made
// where a recorded one was freed is not taken for it). It also owns
// telling two baggages apart by their map (BaggageID), for whoever keeps
// what it built from one. It owns nothing else; otelsession sets the hooks at start-up.
package sessionstate
