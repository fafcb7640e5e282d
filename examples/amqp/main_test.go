package main

import (
	"fmt"
	neturl "net/url"
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

// A password never appears in what the example prints.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:s3cret@127.0.0.1:5672/": "amqp://guest:xxxxx@127.0.0.1:5672/",
		"amqp://127.0.0.1/vhost":              "amqp://127.0.0.1/vhost",
		"amqp://user@host:5672/":              "amqp://user@host:5672/",
		"amqp://u:p@h/%zz":                    "(an unparsable URL)",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// A wrong password is said to be one, and the error does not show it.
func TestRunWithWrongPassword(t *testing.T) {
	good, err := neturl.Parse(rabbit.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	good.User = neturl.UserPassword(good.User.Username(), "not-the-password")
	err = run(good.String(), 1, 1)
	if err == nil {
		t.Fatal("no error with a wrong password")
	}
	if !strings.Contains(err.Error(), "refused the user name or password") || strings.Contains(err.Error(), "not-the-password") {
		t.Errorf("the error should say the credentials were refused, without showing them: %v", err)
	}
}
