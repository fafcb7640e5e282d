package kafkasession_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The shared fixtures, under the names these tests use.
var (
	w3c        = sessiontest.W3C
	newTracing = sessiontest.NewTracing
	sessionFor = sessiontest.SessionFor
	received   = sessiontest.Received
	diff       = sessiontest.Diff
	workerBase = sessiontest.WorkerBase
	withTenant = sessiontest.WithTenant
)
