package sessionevent

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/mention"
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
		if !mention.Mentioned(l) {
			continue
		}
		if b, err := baggage.Parse(l); err == nil && propagation.HasSession(b) {
			return true
		}
	}
	return false
}
