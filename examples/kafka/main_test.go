package main

import "testing"

// The example, as a user runs it, against its in-process cluster: run fails
// when any record is handled in the wrong session.
func TestRun(t *testing.T) {
	if err := run("", "chat-in", 3, 2); err != nil {
		t.Fatal(err)
	}
}
