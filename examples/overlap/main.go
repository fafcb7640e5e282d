// Command overlap replays the bug sessionwire exists to fix, in one process.
//
// A gateway handles chat messages concurrently. Each handler records where its
// message came from, does some slow agent work, and then sends a notification
// back to "its" thread. With the session kept in the process environment (the
// way it was done before contexts), a handler that started later overwrites
// the thread of one still working, and notifications land in the wrong
// thread. With the session bound in the context by otelsession, every
// notification goes home.
//
//	go run ./examples/overlap                 # both stores, side by side
//	go run ./examples/overlap -messages 2000  # more load
//
// It exits with status 1 if the context store misroutes anything.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sessionwire/sessionwire/examples/internal/exampleflag"
	"github.com/sessionwire/sessionwire/otelsession"
)

func main() {
	messages := flag.Int("messages", 500, "concurrent messages to handle")
	work := flag.Duration("work", 20*time.Millisecond, "longest simulated agent work per message")
	exampleflag.Parse("overlap", `Replays, in one process, the bug sessionwire exists to fix: concurrent
message handlers each bind their chat thread, work a while, then notify
"their" thread. It runs the load twice, with the session kept in the process
environment (the old way) and in the context (otelsession), and prints how
many notifications each store delivered to the right thread and how many it
misrouted. Exit status 1 if the context store misroutes any.`,
		"overlap                  500 messages, both stores side by side",
		"overlap -messages 2000   more load")
	if *messages < 1 || *work <= 0 {
		exampleflag.Fail("overlap", "-messages must be at least 1 and -work positive")
	}

	fmt.Printf("%d concurrent messages, up to %v of work each\n\n", *messages, *work)
	fmt.Printf("%-28s %10s %10s\n", "session store", "delivered", "misrouted")
	env := run(*messages, *work, envStore{})
	fmt.Printf("%-28s %10d %10d\n", "process environment (old)", env.delivered, env.misrouted)
	ctx := run(*messages, *work, contextStore{})
	fmt.Printf("%-28s %10d %10d\n", "context (otelsession)", ctx.delivered, ctx.misrouted)
	if ctx.misrouted > 0 {
		os.Exit(1)
	}
}

// store is where a handler keeps its session while it works.
type store interface {
	bind(ctx context.Context, chat, thread string) context.Context
	thread(ctx context.Context) string
}

// envStore is the old way: one process-wide variable, last writer wins.
type envStore struct{}

func (envStore) bind(ctx context.Context, _, thread string) context.Context {
	if err := os.Setenv("HERMES_SESSION_THREAD_ID", thread); err != nil {
		fmt.Fprintln(os.Stderr, "overlap: set the process environment:", err)
		os.Exit(2)
	}
	return ctx
}

func (envStore) thread(context.Context) string { return os.Getenv("HERMES_SESSION_THREAD_ID") }

// contextStore binds the session in the handler's own context.
type contextStore struct{}

func (contextStore) bind(ctx context.Context, chat, thread string) context.Context {
	return otelsession.Bind(ctx, otelsession.Session{Platform: "telegram", ChatID: chat, ThreadID: thread})
}

func (contextStore) thread(ctx context.Context) string {
	return otelsession.Getenv(ctx, "HERMES_SESSION_THREAD_ID", "")
}

type result struct{ delivered, misrouted int64 }

func run(n int, work time.Duration, s store) result {
	var delivered, misrouted atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			thread := fmt.Sprintf("thread-%d", i)
			ctx := s.bind(context.Background(), fmt.Sprintf("chat-%d", i%50), thread)
			time.Sleep(rand.N(work)) // the agent thinks; other messages arrive
			if s.thread(ctx) == thread {
				delivered.Add(1)
			} else {
				misrouted.Add(1)
			}
		})
	}
	wg.Wait()
	return result{delivered.Load(), misrouted.Load()}
}
