package sessiontest

import (
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// QueueSpans is what the spans of messages carried through a broker must
// look like, per the OpenTelemetry messaging conventions.
type QueueSpans struct {
	ProducerName, ConsumerName string
	// Producer and Consumer are attributes each producer (consumer) span
	// must have, with these values.
	Producer, Consumer map[attribute.Key]string
	// Messages is the number of producer spans; Deliveries that of consumer
	// spans (more when messages are delivered again).
	Messages, Deliveries int
}

// Check reports every way spans, recorded with otelsession/sessiontrace's
// span processor, differ from w: each consumer span must be the remote child
// of a producer span, linked to it, and carry the same session.chat_id.
func (w QueueSpans) Check(t testing.TB, spans tracetest.SpanStubs) {
	t.Helper()
	attrs := func(s tracetest.SpanStub) map[attribute.Key]string {
		m := map[attribute.Key]string{}
		for _, kv := range s.Attributes {
			m[kv.Key] = kv.Value.String()
		}
		return m
	}
	producers := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindProducer {
			producers[s.SpanContext.SpanID()] = s
		}
	}
	var bad, ncons int
	report := func(s tracetest.SpanStub, problems []string) {
		if len(problems) > 0 {
			if bad++; bad <= 5 {
				t.Errorf("%s span %s: %s", s.SpanKind, s.SpanContext.SpanID(), strings.Join(problems, "; "))
			}
		}
	}
	has := func(a, want map[attribute.Key]string) (problems []string) {
		for k, v := range want {
			if a[k] != v {
				problems = append(problems, fmt.Sprintf("%s = %q, want %q", k, a[k], v))
			}
		}
		return problems
	}
	for _, p := range producers {
		problems := has(attrs(p), w.Producer)
		if p.Name != w.ProducerName {
			problems = append(problems, "named "+p.Name)
		}
		if attrs(p)["session.chat_id"] == "" {
			problems = append(problems, "no session.chat_id")
		}
		report(p, problems)
	}
	for _, s := range spans {
		if s.SpanKind != trace.SpanKindConsumer {
			continue
		}
		ncons++
		a := attrs(s)
		problems := has(a, w.Consumer)
		if s.Name != w.ConsumerName {
			problems = append(problems, "named "+s.Name)
		}
		p, ok := producers[s.Parent.SpanID()]
		switch {
		case !ok || !s.Parent.IsRemote():
			problems = append(problems, "its parent is not a producer span")
		case attrs(p)["session.chat_id"] != a["session.chat_id"]:
			problems = append(problems, fmt.Sprintf("session.chat_id %q, the producer's %q", a["session.chat_id"], attrs(p)["session.chat_id"]))
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != s.Parent.SpanID() {
			problems = append(problems, "not linked to the producer span")
		}
		report(s, problems)
	}
	if len(producers) != w.Messages || ncons != w.Deliveries {
		t.Errorf("%d producer and %d consumer spans, want %d and %d", len(producers), ncons, w.Messages, w.Deliveries)
	}
	if bad > 0 {
		t.Errorf("%d spans are wrong", bad)
	}
}
