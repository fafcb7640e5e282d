package kafkasession_test

import "github.com/sessionwire/sessionwire/propagation"

// toQueue lets the session into every destination: the tests' publishers
// send to a broker of their own. Tests of the outbound policy itself say
// what they allow.
var toQueue = propagation.NewOutbound(propagation.AllowAll)
