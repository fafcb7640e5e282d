package otelsession_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/otelsession"
)

// 10,000 goroutines, all started from one shared parent, each bind a distinct
// session, yield, and read back only their own.
func TestConcurrentSessionsNeverMix(t *testing.T) {
	t.Parallel()
	const n = 10_000
	parent := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "parent", ThreadID: "parent"})
	inParallel(t, n, func(i int) string {
		ctx := otelsession.Bind(otelsession.Reset(parent), otelsession.Session{
			Platform: "telegram", ChatID: fmt.Sprint("chat-", i%300), ThreadID: fmt.Sprint("thread-", i),
			MessageID: fmt.Sprint(i), UISessionID: fmt.Sprint("tab-", i),
		})
		for range 3 {
			s := otelsession.FromContext(ctx)
			if s.ThreadID != fmt.Sprint("thread-", i) || s.MessageID != fmt.Sprint(i) ||
				s.ChatID != fmt.Sprint("chat-", i%300) || s.UISessionID != fmt.Sprint("tab-", i) {
				return fmt.Sprintf("goroutine %d read %+v", i, s)
			}
		}
		return ""
	})
	if got := otelsession.FromContext(parent).ThreadID; got != "parent" {
		t.Errorf("parent changed to %q", got)
	}
}

// 4,000 goroutines bind the sessions of 40 conversations, a message id each,
// over the application's own members (a tenant each goroutine names, and on
// half of them a second member), so that the bind cache merges them into
// the sessions it holds while other goroutines bind the same ones: each
// reads back its own session, its own members and nothing else.
func TestConcurrentBindsOverApplicationBaggageNeverMix(t *testing.T) {
	t.Parallel()
	const n = 4_000
	before := otelsession.BindCache()
	inParallel(t, n, func(i int) string {
		tenant, _ := baggage.NewMemberRaw("app.tenant", fmt.Sprint("t-", i))
		b, _ := baggage.New(tenant)
		if i%2 == 0 {
			plan, _ := baggage.NewMemberRaw("app.plan", fmt.Sprint("p-", i))
			b, _ = b.SetMember(plan)
		}
		s := otelsession.Session{Platform: "slack", ChatID: fmt.Sprint("chat-", i%40), ThreadID: "t", MessageID: fmt.Sprint(i)}
		ctx := otelsession.Bind(baggage.ContextWithBaggage(context.Background(), b), s)
		got := baggage.FromContext(ctx)
		wantLen := 1
		if i%2 == 0 {
			wantLen = 2
		}
		apps := 0
		for _, m := range got.Members() {
			if !otelsession.OwnedKey(m.Key()) {
				apps++
			}
		}
		if fs := otelsession.FromContext(ctx); fs.ChatID != s.ChatID || fs.MessageID != s.MessageID ||
			got.Member("app.tenant").Value() != fmt.Sprint("t-", i) || apps != wantLen ||
			(i%2 == 0 && got.Member("app.plan").Value() != fmt.Sprint("p-", i)) {
			return fmt.Sprintf("goroutine %d read %+v beside %q", i, fs, got.String())
		}
		return ""
	})
	// All but each conversation's first few Binds are merged from the
	// cache (other tests' Binds may add to the count, never take from it).
	if hits := otelsession.BindCache().Hits - before.Hits; hits < n/2 {
		t.Errorf("%d of %d Binds over the application's members served from the cache", hits, n)
	}
}

// inParallel runs each(i) for i in [0, n) on n goroutines released at
// once, and fails t with every non-empty report they return.
func inParallel(t *testing.T, n int, each func(i int) string) {
	t.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var mixed []string
	for i := range n {
		wg.Go(func() {
			<-start
			if m := each(i); m != "" {
				mu.Lock()
				mixed = append(mixed, m)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	for _, m := range mixed {
		t.Error(m)
	}
}
