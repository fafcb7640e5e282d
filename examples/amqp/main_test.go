package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sessionwire/sessionwire/internal/rabbitmqtest"
)

var rabbit rabbitmqtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := rabbit.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the RabbitMQ broker:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// The example, as a user runs it, against a real RabbitMQ: run fails when
// any message is handled in the wrong session.
func TestRun(t *testing.T) {
	if err := run(rabbit.URL(t), 3, 2); err != nil {
		t.Fatal(err)
	}
}

// Without a broker, the error says what to do.
func TestRunWithoutBroker(t *testing.T) {
	err := run("amqp://guest:guest@127.0.0.1:1/", 1, 1)
	if err == nil {
		t.Fatal("no error without a broker")
	}
	if !strings.Contains(err.Error(), "rabbitmq-server") || !strings.Contains(err.Error(), "-amqp") {
		t.Errorf("the error does not say how to get a broker: %v", err)
	}
}
