package amqpsession_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sessionwire/sessionwire/internal/rabbitmqtest"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

// rabbit is the package's RabbitMQ broker, started by the first test that
// needs it and stopped when the tests end.
var rabbit rabbitmqtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := rabbit.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the RabbitMQ broker:", err)
		code = max(code, 1)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
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
