package execsession_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"

	"go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/execsession"
)

// A gateway's process environment holds whatever the last message wrote;
// the child of this message gets this message's session, and nothing of the
// other one.
func ExampleEnviron() {
	ctx := otelsession.Bind(context.Background(), otelsession.Session{
		Platform: "telegram", ThreadID: "17585", UISessionID: "tab-3",
	})
	inherited := []string{"PATH=/usr/bin", "HERMES_SESSION_THREAD_ID=stale"}

	env := execsession.Config{Propagator: propagation.Baggage{}}.Environ(ctx, inherited)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "HERMES_SESSION_THREAD_ID", "HERMES_SESSION_USER_ID", "HERMES_UI_SESSION_ID":
			fmt.Println(kv)
		case "BAGGAGE":
			fmt.Println("BAGGAGE has session.thread_id=17585:", strings.Contains(kv, "session.thread_id=17585"))
			fmt.Println("BAGGAGE has the UI session:", strings.Contains(kv, "ui_session"))
		}
	}
	// Output:
	// PATH=/usr/bin
	// HERMES_SESSION_THREAD_ID=17585
	// HERMES_SESSION_USER_ID=
	// HERMES_UI_SESSION_ID=tab-3
	// BAGGAGE has session.thread_id=17585: true
	// BAGGAGE has the UI session: false
}

// A handler runs a tool with its session; the tool starts in the session's
// working directory.
func ExampleCommand() {
	ctx := otelsession.Bind(context.Background(), otelsession.Session{
		Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100", Cwd: os.TempDir(),
	})
	out, err := execsession.Command(ctx, "sh", "-c", `echo "$HERMES_SESSION_THREAD_ID"`).Output()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(out))
}

// A tool written in Go restores its session with one call at start-up.
func ExampleFromEnvironment() {
	ctx, err := execsession.FromEnvironment(context.Background())
	if err != nil {
		// The parent sent something it could not have written: the session
		// is Unset, and the tool goes on without one or stops.
		log.Printf("no session: %v", err)
	}
	thread, state := otelsession.Lookup(ctx, otelsession.FieldThreadID)
	fmt.Println(thread, state, otelsession.Cwd(ctx))
}
