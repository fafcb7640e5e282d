package otelsession_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sessionwire/sessionwire/otelsession"
)

// 10,000 goroutines, all started from one shared parent, each bind a distinct
// session, yield, and read back only their own.
func TestConcurrentSessionsNeverMix(t *testing.T) {
	t.Parallel()
	const n = 10_000
	parent := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "parent", ThreadID: "parent"})
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var mixed []string
	for i := range n {
		wg.Go(func() {
			<-start
			ctx := otelsession.Bind(otelsession.Reset(parent), otelsession.Session{
				Platform: "telegram", ChatID: fmt.Sprint("chat-", i%300), ThreadID: fmt.Sprint("thread-", i),
				MessageID: fmt.Sprint(i), UISessionID: fmt.Sprint("tab-", i),
			})
			for range 3 {
				s := otelsession.FromContext(ctx)
				if s.ThreadID != fmt.Sprint("thread-", i) || s.MessageID != fmt.Sprint(i) ||
					s.ChatID != fmt.Sprint("chat-", i%300) || s.UISessionID != fmt.Sprint("tab-", i) {
					mu.Lock()
					mixed = append(mixed, fmt.Sprintf("goroutine %d read %+v", i, s))
					mu.Unlock()
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for _, m := range mixed {
		t.Error(m)
	}
	if got := otelsession.FromContext(parent).ThreadID; got != "parent" {
		t.Errorf("parent changed to %q", got)
	}
}
