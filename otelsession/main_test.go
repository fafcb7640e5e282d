package otelsession_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.uber.org/goleak"

	"github.com/sessionwire/sessionwire/fallback"
)

// reported collects what the package reports to otel.Handle. The handler is
// process-wide, so tests that assert on it do not call t.Parallel (Go runs
// every sequential top-level test before any parallel one).
var reported = &errorLog{}

type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) Handle(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// take returns and forgets what was reported.
func (l *errorLog) take() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := l.errs
	l.errs = nil
	return errs
}

func (l *errorLog) has(target error) bool {
	for _, err := range l.take() {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

func TestMain(m *testing.M) {
	if os.Getenv(engagedProbeEnv) != "" {
		runEngagedProbe() // a child process started by TestEngaged
		return
	}
	otel.SetErrorHandler(reported)
	goleak.VerifyTestMain(m)
}

// envCtx returns a background context whose fallback environment is an
// in-memory map, so tests can run in parallel without touching os.Environ.
func envCtx(vars map[string]string) (context.Context, *fallback.Map) {
	m := fallback.NewMap(vars)
	return fallback.WithEnv(context.Background(), m), m
}
