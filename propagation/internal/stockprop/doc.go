// Package stockprop owns what the policies know of OpenTelemetry's own
// propagators: which of them write and read the W3C baggage entry, read
// through a composite without boxing its parts, and the rule by which an
// extraction through them can hold no session member at all (one baggage
// line, read through Get, naming no session key in any spelling). The
// inbound policy returns such an extraction as it is, and a transport asks
// the same rule before describing its peer for the policy, which that
// extraction never consults. It sits below package propagation so that the
// policy and the transports built on it share one rule.
package stockprop
