// Package mention owns the cheap test of whether a raw baggage line may hold
// a session member at all, in any spelling. Every inbound boundary asks it
// before work that only a session needs: the inbound policy (a line that
// names no session is extracted as it is, no check), and the transports'
// span events and metadata re-encoding for a stripped session. It sits below
// package propagation so that the policy and the packages built on it share
// one rule.
package mention
