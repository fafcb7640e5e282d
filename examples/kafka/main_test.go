package main

import (
	"strings"
	"testing"
	"time"
)

// The example, as a user runs it, against its in-process cluster: run fails
// when any record is handled in the wrong session.
func TestRun(t *testing.T) {
	if err := run(nil, "chat-in", 3, 2); err != nil {
		t.Fatal(err)
	}
}

// Without a broker, the error comes at once and says what to do, rather
// than after every produce has waited out the run's 30 s.
func TestRunWithoutBroker(t *testing.T) {
	start := time.Now()
	err := run([]string{"127.0.0.1:1"}, "chat-in", 1, 1)
	if err == nil {
		t.Fatal("no error without a broker")
	}
	if !strings.Contains(err.Error(), "cannot reach a Kafka broker at 127.0.0.1:1") || !strings.Contains(err.Error(), "-brokers") {
		t.Errorf("the error does not say what is wrong and what to do: %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the error took %v", d)
	}
}

// A topic Kafka would refuse is a command-line mistake, caught before any
// broker is dialled.
func TestValidTopic(t *testing.T) {
	for _, good := range []string{"chat-in", "sessionwire.demo_1", strings.Repeat("a", 249)} {
		if !validTopic(good) {
			t.Errorf("%q refused", good)
		}
	}
	for _, bad := range []string{"", ".", "..", "chat in", "chat/in", "chät", strings.Repeat("a", 250)} {
		if validTopic(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}
