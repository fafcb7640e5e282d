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
