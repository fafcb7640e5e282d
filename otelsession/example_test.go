package otelsession_test

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/otelsession"
)

// A handler binds the message's session; everything it calls reads the
// session from the context, whatever other messages are in flight.
func ExampleBind() {
	ctx := otelsession.Bind(context.Background(), otelsession.Session{
		Platform:  "telegram",
		ChatID:    "-1001234567890",
		ThreadID:  "17585",
		MessageID: "88121",
	})
	fmt.Println(otelsession.Getenv(ctx, "HERMES_SESSION_THREAD_ID", ""))
	fmt.Println(otelsession.IsMessagingSurface(ctx), otelsession.AsyncDeliverySupported(ctx))
	// Output:
	// 17585
	// true true
}

// Lookup tells the three states apart; Getenv only falls back for Unset.
func ExampleLookup() {
	env := fallback.NewMap(map[string]string{"HERMES_SESSION_CHAT_ID": "stale"})
	ctx := fallback.WithEnv(context.Background(), env)

	_, st := otelsession.Lookup(ctx, otelsession.FieldChatID)
	fmt.Println(st, otelsession.Getenv(ctx, "HERMES_SESSION_CHAT_ID", "none"))

	ctx = otelsession.Bind(ctx, otelsession.Session{ChatID: "42"})
	v, st := otelsession.Lookup(ctx, otelsession.FieldChatID)
	fmt.Println(st, v)

	ctx = otelsession.Clear(ctx)
	_, st = otelsession.Lookup(ctx, otelsession.FieldChatID)
	fmt.Printf("%s %q\n", st, otelsession.Getenv(ctx, "HERMES_SESSION_CHAT_ID", "none"))
	// Output:
	// unset stale
	// set 42
	// cleared ""
}

// A worker goroutine inherits its creator's context. Reset it before the
// work binds its own session, so that nothing it runs in between can act for
// the wrong conversation.
func ExampleReset() {
	parent := otelsession.Bind(context.Background(), otelsession.Session{ThreadID: "A"})
	done := make(chan struct{})
	go func(ctx context.Context) {
		defer close(done)
		ctx = otelsession.Reset(ctx)
		_, st := otelsession.Lookup(ctx, otelsession.FieldThreadID)
		fmt.Println("after Reset:", st)
		ctx = otelsession.Bind(ctx, otelsession.Session{ThreadID: "B"})
		fmt.Println("own session:", otelsession.Getenv(ctx, "HERMES_SESSION_THREAD_ID", ""))
	}(parent)
	<-done
	fmt.Println("parent still:", otelsession.Getenv(parent, "HERMES_SESSION_THREAD_ID", ""))
	// Output:
	// after Reset: unset
	// own session: B
	// parent still: A
}

// A session crosses a process boundary with nothing but the stock W3C
// baggage propagator; Cleared arrives as Cleared.
func ExampleBind_propagation() {
	ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C024BE91L"})
	header := propagation.MapCarrier{}
	propagation.Baggage{}.Inject(ctx, header)

	remote := propagation.Baggage{}.Extract(context.Background(), header)
	v, _ := otelsession.Lookup(remote, otelsession.FieldChatID)
	_, st := otelsession.Lookup(remote, otelsession.FieldThreadID)
	fmt.Println(v, st)
	fmt.Println(strings.Contains(header.Get("baggage"), "session.thread_id=%00"))
	// Output:
	// C024BE91L cleared
	// true
}

// The footprint of a full session in the W3C baggage budget it shares with the
// application (64 members, 8192 bytes).
func ExampleBind_footprint() {
	ctx := otelsession.Bind(context.Background(), fullSession())
	b := baggage.FromContext(ctx)
	fmt.Printf("full session: %d members, %d bytes\n", b.Len(), len(b.String()))

	ctx = otelsession.Bind(context.Background(), otelsession.Session{})
	b = baggage.FromContext(ctx)
	fmt.Printf("all cleared: %d members, %d bytes\n", b.Len(), len(b.String()))
	// Output:
	// full session: 16 members, 500 bytes
	// all cleared: 15 members, 313 bytes
}

// A delegated child (a subagent built in its parent's process) gets its own
// session id; the process-wide HERMES_SESSION_ID keeps the parent's.
func ExampleWithDelegatedChild() {
	env := fallback.NewMap(nil)
	root := otelsession.WithSessionID(fallback.WithEnv(context.Background(), env), "parent")
	child := otelsession.WithDelegatedChild(root, "child")

	fmt.Println(otelsession.Getenv(child, "HERMES_SESSION_ID", ""), otelsession.IsDelegatedChild(child))
	fmt.Println(env.Getenv("HERMES_SESSION_ID"))
	// Output:
	// child true
	// parent
}

// Validate refuses bad input at the edge, before Bind would clear it.
func ExampleSession_Validate() {
	err := otelsession.Session{ChatID: "42", ThreadID: "\xff"}.Validate()
	fmt.Println(err)
	// Output:
	// otelsession: invalid session: session.thread_id: not valid UTF-8: invalid session value
}
