package sessionevent

import (
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// Name is the span event's name.
const Name = "session.refused"

// ReasonKey is the event's attribute saying why.
const ReasonKey = attribute.Key("session.refusal.reason")

// Refused records a refusal returned by propagation.Inbound.Extract.
func Refused(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.AddEvent(Name, trace.WithAttributes(ReasonKey.String(err.Error())))
}

// StrippedIfOffered records that the session was stripped as untrusted when
// the baggage header lines offered one and the extracted context (accepted
// holds its baggage) has none. Call it only when Extract returned no error.
// The header is parsed only on that path, and only when it mentions the
// session namespace at all.
func StrippedIfOffered(span trace.Span, accepted baggage.Baggage, lines []string, p propagation.Peer) {
	if !span.IsRecording() || propagation.HasSession(accepted) || !offered(lines) {
		return
	}
	who := p.Transport
	if p.Name != "" {
		who += " " + p.Name
	}
	if p.Addr.IsValid() {
		who += " from " + p.Addr.String()
	}
	span.AddEvent(Name, trace.WithAttributes(ReasonKey.String(
		"untrusted: the session carried no valid signature and the peer ("+who+") is not trusted to set one")))
}

// offered reports whether lines hold a session member.
func offered(lines []string) bool {
	for _, l := range lines {
		if !Mentioned(l) {
			continue
		}
		if b, err := baggage.Parse(l); err == nil && propagation.HasSession(b) {
			return true
		}
	}
	return false
}

// Mentioned reports whether a baggage line may hold a session member. It is
// a cheap over-approximation, so that a boundary parses a line again only
// when it could matter: it never says no for a line with a session member, in
// any spelling (case-folded, percent-encoded, or with a non-ASCII letter that
// folds to an ASCII one, as U+017F folds to "s"), and may say yes for a line
// without one. One pass: a window of the key prefix's length that holds a
// non-ASCII byte has fewer runes than the prefix and cannot fold to it, so
// only windows that start with a byte folding to its first are compared.
func Mentioned(line string) bool {
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
