package mention_test

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/mention"
)

// mentionedNaively is Mentioned's rule as first written, one condition at a
// time: a '%', a non-ASCII byte, or a window that folds to the key prefix.
func mentionedNaively(line string) bool {
	if strings.IndexByte(line, '%') >= 0 {
		return true
	}
	for i := 0; i < len(line); i++ {
		if line[i] >= 0x80 {
			return true
		}
	}
	p := otelsession.KeyPrefix
	for i := 0; i+len(p) <= len(line); i++ {
		if strings.EqualFold(line[i:i+len(p)], p) {
			return true
		}
	}
	return false
}

// FuzzMentionedIsTheNaiveRule holds the one-pass Mentioned to the rule it
// implements, and to its promise: a line whose parsed baggage holds a
// session member is always mentioned.
//
//	go test ./propagation/internal/mention -run '^$' -fuzz '^FuzzMentionedIsTheNaiveRule$' -fuzztime 20s
func FuzzMentionedIsTheNaiveRule(f *testing.F) {
	for _, seed := range []string{
		"", "app.tenant=t-42,app.plan=pro", "session.chat_id=a", "SESSION.CHAT_ID=a", "app.a=1,Session.x=2",
		"sessio", "session", "session.", "xsession.", "ſession.chat_id=a", "app.a=%73ession", "s", "S",
		"app.s=1,app.S=2,app.sessio=3", "a=\xff",
		// Across and at the edges of the eight-byte steps.
		"app.a=12345678%", "app.a=1234567\xff", "app.tenant=t-42,app.plan=pro,app.region=eu-west-1",
		"app.a=1,xSESSION.chat_id=c", "app.abc=1234session.", "app.abcd=1234sessio", "0123456789abcdefſ",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if got, want := mention.Mentioned(line), mentionedNaively(line); got != want {
			t.Fatalf("Mentioned(%q) = %v, the rule says %v", line, got, want)
		}
		if b, err := baggage.Parse(line); !mention.Mentioned(line) && err == nil && propagation.HasSession(b) {
			t.Fatalf("%q offers a session, and Mentioned says no", line)
		}
	})
}

// BenchmarkMentioned is the test on an application's own baggage, as a call
// without a session carries it, and on a full session's line (found at its
// first key), beside the rule's byte-at-a-time pass (its form before the
// eight-byte steps).
//
//	go test ./propagation/internal/mention -run '^$' -bench BenchmarkMentioned
func BenchmarkMentioned(b *testing.B) {
	for _, c := range []struct{ name, line string }{
		{"application_baggage", "app.tenant=t-42,app.plan=pro,app.region=eu-west-1"},
		{"application_baggage_long", strings.Repeat("app.tenant=t-42,app.plan=pro,app.region=eu-west-1,", 8)},
		{"session", "session.platform=telegram,session.chat_id=-100123,app.tenant=t-42"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				sink = mention.Mentioned(c.line)
			}
		})
		b.Run(c.name+"/baseline_byte_at_a_time", func(b *testing.B) {
			for b.Loop() {
				sink = byteAtATime(c.line)
			}
		})
	}
}

var sink bool

// byteAtATime is Mentioned's one pass without the eight-byte steps.
func byteAtATime(line string) bool {
	const p = otelsession.KeyPrefix
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '%' || c >= 0x80:
			return true
		case c|0x20 == p[0] && len(line)-i >= len(p) && strings.EqualFold(line[i:i+len(p)], p):
			return true
		}
	}
	return false
}
