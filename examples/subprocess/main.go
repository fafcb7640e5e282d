// Command subprocess shows a session crossing into child processes.
//
// It plays a gateway that handles several chat messages at once. Each
// message binds its own session and runs a tool as a child process (this
// same program, started again in "tool" mode). The tool reads its session
// twice: the Go way, with execsession.FromEnvironment, and the legacy way,
// with plain os.Getenv("HERMES_SESSION_THREAD_ID"), as a script would. The
// gateway checks that every tool saw its own message's session, trace and
// working directory, and none of the stale value it left in its own process
// environment (the bug sessions in contexts exist to fix).
//
//	go run ./examples/subprocess
//
// It exits with status 1 if any tool saw the wrong session.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/examples/internal/exampleflag"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/execsession"
)

// seen is what a tool prints about itself.
type seen struct {
	ThreadFromContext string `json:"thread_from_context"` // otelsession.Getenv after FromEnvironment
	ThreadFromOS      string `json:"thread_from_os"`      // os.Getenv, as a script would
	Platform          string `json:"platform"`
	ChatID            string `json:"chat_id"`
	UISessionID       string `json:"ui_session_id"` // a local field: never in baggage
	TraceID           string `json:"trace_id"`
	Cwd               string `json:"cwd"` // the session's directory, as FromEnvironment restored it
	Wd                string `json:"wd"`  // where the tool actually runs
}

func main() {
	// W3C trace context and baggage, in the gateway and in its tools.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if len(os.Args) > 1 && os.Args[1] == "tool" {
		if err := tool(); err != nil {
			fmt.Fprintln(os.Stderr, "tool:", err)
			os.Exit(1)
		}
		return
	}
	exampleflag.Parse("subprocess", `Shows a session crossing into child processes. It plays a gateway handling
several chat messages at once; each binds its own session and runs a tool as
a child process (this program again), which reads its session twice: with
execsession.FromEnvironment, and with plain os.Getenv as a script would. It
prints, per message, the thread each way, and whether the tool had the
message's trace and working directory. Exit status 1 if any tool saw the
wrong session.`, "subprocess")
	if err := gateway(); err != nil {
		fmt.Fprintln(os.Stderr, "subprocess example:", err)
		os.Exit(1)
	}
}

// tool is the child: one call restores the session its parent passed.
func tool() error {
	ctx, err := execsession.FromEnvironment(context.Background())
	if err != nil {
		return err
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	s := otelsession.FromContext(ctx)
	return json.NewEncoder(os.Stdout).Encode(seen{
		ThreadFromContext: otelsession.Getenv(ctx, "HERMES_SESSION_THREAD_ID", ""),
		ThreadFromOS:      os.Getenv("HERMES_SESSION_THREAD_ID"),
		Platform:          s.Platform,
		ChatID:            s.ChatID,
		UISessionID:       s.UISessionID,
		TraceID:           trace.SpanContextFromContext(ctx).TraceID().String(),
		Cwd:               otelsession.Cwd(ctx),
		Wd:                wd,
	})
}

type message struct {
	platform, chat, thread string
}

func gateway() error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program to start it as a tool: %w", err)
	}
	// The bug being fixed: a gateway that kept sessions in its process
	// environment had whichever message wrote it last in there.
	if err := os.Setenv("HERMES_SESSION_THREAD_ID", "stale-from-the-last-message"); err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "sessionwire-subprocess-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)

	// Spans only need IDs here; nothing is exported.
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer("examples/subprocess")

	messages := []message{
		{"telegram", "-1001234567890", "17585"},
		{"discord", "1122334455", "998877"},
		{"slack", "C024BE91L", "1700000000.000100"},
		{"telegram", "-1009876543210", "42"},
		{"matrix", "!room:example.org", "$event1"},
	}
	results := make([]string, len(messages))
	errs := make([]error, len(messages))
	var wg sync.WaitGroup
	for i, m := range messages {
		wg.Go(func() {
			results[i], errs[i] = handle(tracer, self, root, i, m)
		})
	}
	wg.Wait()

	fmt.Printf("%-9s %-18s %-18s %-18s %s\n", "platform", "thread", "tool: context", "tool: os.Getenv", "trace, cwd")
	for _, r := range results {
		if r != "" {
			fmt.Println(r)
		}
	}
	misrouted := 0
	for i, err := range errs {
		if err != nil {
			misrouted++
			fmt.Fprintf(os.Stderr, "message %d: %v\n", i, err)
		}
	}
	fmt.Printf("%d messages, %d tools, %d saw the wrong session\n", len(messages), len(messages), misrouted)
	if misrouted > 0 {
		return errors.New("a tool saw the wrong session")
	}
	return nil
}

// handle is one message: bind its session, run the tool, check what it saw.
func handle(tracer trace.Tracer, self, root string, i int, m message) (string, error) {
	dir := filepath.Join(root, fmt.Sprint("session-", i))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	ctx, span := tracer.Start(context.Background(), "handle message")
	defer span.End()
	ctx = otelsession.Bind(ctx, otelsession.Session{
		Platform: m.platform, ChatID: m.chat, ThreadID: m.thread,
		UISessionID: fmt.Sprint("tab-", i), Cwd: dir,
	})

	out, err := execsession.Command(ctx, self, "tool").Output()
	if err != nil {
		return "", fmt.Errorf("run the tool: %w", err)
	}
	var got seen
	if err := json.Unmarshal(out, &got); err != nil {
		return "", fmt.Errorf("read what the tool printed (%q): %w", out, err)
	}
	wd, _ := filepath.EvalSymlinks(got.Wd)
	wantWd, _ := filepath.EvalSymlinks(dir)
	ok := got.ThreadFromContext == m.thread && got.ThreadFromOS == m.thread &&
		got.Platform == m.platform && got.ChatID == m.chat && got.UISessionID == fmt.Sprint("tab-", i) &&
		got.TraceID == span.SpanContext().TraceID().String() && got.Cwd == dir && wd == wantWd
	line := fmt.Sprintf("%-9s %-18s %-18s %-18s %s", m.platform, m.thread, got.ThreadFromContext, got.ThreadFromOS,
		map[bool]string{true: "same", false: "DIFFERENT"}[got.TraceID == span.SpanContext().TraceID().String() && wd == wantWd])
	if !ok {
		return line, fmt.Errorf("sent thread %s on %s, the tool saw %+v", m.thread, m.platform, got)
	}
	return line, nil
}
