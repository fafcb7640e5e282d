// Package demotrace sets up tracing for the example programs: every span
// carries the session (sessiontrace), and spans go to an OTLP/HTTP collector
// when OTEL_EXPORTER_OTLP_ENDPOINT is set, or to an in-memory Summary that a
// program prints as counts by service and span name.
package demotrace

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"

	"github.com/sessionwire/sessionwire/otelsession/sessiontrace"
)

// hashKey keys the hashing of user names on spans. A real deployment loads a
// secret and keeps it stable; the demo's is fixed so runs correlate.
var hashKey = []byte("sessionwire-demo-key, not a secret")

// spanSession puts the session on every span of every provider of this
// package.
var spanSession = sessiontrace.NewSpanProcessor(sessiontrace.Redaction{HashKey: hashKey})

// NewProvider returns a tracer provider for one role of a program: spans
// carry the session and go to OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is
// set, else to sum.
func NewProvider(ctx context.Context, service string, sum *Summary) (*sdktrace.TracerProvider, error) {
	var exp sdktrace.SpanExporter = sum
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		e, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("create the OTLP exporter for %s: %w", service, err)
		}
		exp = e
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))),
		sdktrace.WithSpanProcessor(spanSession),
		sdktrace.WithBatcher(exp),
	), nil
}

// Summary is the default exporter: it counts spans by service and name, so
// the demo prints what was traced without a flood.
type Summary struct {
	mu     sync.Mutex
	counts map[string]int
}

func (s *Summary) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	for _, sp := range spans {
		service := ""
		for _, kv := range sp.Resource().Attributes() {
			if kv.Key == semconv.ServiceNameKey {
				service = kv.Value.AsString()
			}
		}
		s.counts[service+" / "+sp.Name()]++
	}
	return nil
}

func (*Summary) Shutdown(context.Context) error { return nil }

func (s *Summary) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := make([]string, 0, len(s.counts))
	for k, n := range s.counts {
		lines = append(lines, fmt.Sprintf("  %4d  %s", n, k))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
