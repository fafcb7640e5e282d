package propagation

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
)

// Signing without copying the baggage. Signer.SignFor adds the signature to
// the context's baggage with Baggage.SetMember, which copies the whole map
// (about a quarter of a signed Outbound.Inject), only for the propagator to
// write it out again. Where the caller drops the context (Outbound.Inject)
// and the injection is known to end as one W3C "baggage" entry holding the
// baggage's String, the signature member is appended to that entry instead:
// the same members reach the wire, in an order W3C leaves free. Anything
// else (another propagator, a carrier whose Set might add a second entry, a
// baggage that already holds a signature) takes the SetMember path.

// appendsSignature reports whether Outbound.Inject may sign out's session
// by appending to what prop writes into carrier: prop writes baggage only
// through OpenTelemetry's W3C propagator, carrier's Set replaces what a key
// held (or the carrier can delete it first), and out's baggage holds no
// signature that the propagator would write beside the new one. checked
// says out's baggage is one an otelsession writer built, which never holds
// a signature.
func appendsSignature(prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, out context.Context, checked bool) bool {
	switch carrier.(type) {
	case otelprop.MapCarrier, otelprop.HeaderCarrier, Deleter:
	default:
		return false
	}
	if w3c, known := stockBaggage(prop, 0); !w3c || !known {
		return false
	}
	return checked || baggage.FromContext(out).Member(otelsession.SignatureKey).Key() == ""
}

// compositeType is the type of OpenTelemetry's composite propagator, a
// slice of propagators it runs in turn.
var compositeType = reflect.TypeOf(otelprop.NewCompositeTextMapPropagator())

// stockBaggage reports whether prop is known (known): OpenTelemetry's
// Baggage or TraceContext propagator, or its composite of known ones; and,
// when known, whether it writes the W3C baggage entry (w3c). A known
// propagator writes baggage nowhere else.
func stockBaggage(prop otelprop.TextMapPropagator, depth int) (w3c, known bool) {
	switch prop.(type) {
	case otelprop.Baggage:
		return true, true
	case otelprop.TraceContext:
		return false, true
	}
	if prop == nil || depth > 3 || reflect.TypeOf(prop) != compositeType {
		return false, false
	}
	v := reflect.ValueOf(prop)
	for i := range v.Len() {
		p, _ := v.Index(i).Interface().(otelprop.TextMapPropagator)
		w, k := stockBaggage(p, depth+1)
		if !k {
			return false, false
		}
		w3c = w3c || w
	}
	return w3c, true
}

// appendTo signs the session of out, which prop has just injected into
// carrier, and appends the signature member to the carrier's baggage entry.
// On an error the carrier keeps the session unsigned, as SignFor's callers
// send it.
func (s *Signer) appendTo(out context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, messageID string) error {
	b := baggage.FromContext(out)
	if n := b.Len() + 1; n > otelsession.MaxBaggageMembers {
		return fmt.Errorf("sign session: %d members, limit %d: %w", n, otelsession.MaxBaggageMembers, ErrSignatureNoRoom)
	}
	written := carrier.Get(baggageHeader)
	if written == "" {
		// Not what a W3C propagator writes for a baggage with a session:
		// sign the context instead and inject it again, which replaces the
		// entries the first injection wrote.
		signed, err := s.SignFor(out, messageID)
		if err == nil {
			prop.Inject(signed, carrier)
		}
		return err
	}
	ts := s.now().Unix()
	if ts < 0 {
		return fmt.Errorf("sign session: the clock reads before 1970: %w", ErrSignatureConfig)
	}
	var vals signedValues
	vals.gather(b)
	var sum [macBytes]byte
	s.key.sum(ts, messageID, &vals, &sum)
	var sigBuf [maxSignatureLen]byte
	sig := appendSignature(sigBuf[:0], s.key.id, ts, &sum)
	// The value is base64url, digits, dots and the key id's letters, digits,
	// "-" and "_": nothing W3C escapes, so the member is written as is.
	size := len(written) + 1 + len(otelsession.SignatureKey) + 1 + len(sig)
	if size > otelsession.MaxBaggageBytes {
		return fmt.Errorf("sign session: %d bytes, limit %d: %w", size, otelsession.MaxBaggageBytes, ErrSignatureNoRoom)
	}
	var line strings.Builder
	line.Grow(size)
	line.WriteString(written)
	line.WriteByte(',')
	line.WriteString(otelsession.SignatureKey)
	line.WriteByte('=')
	line.Write(sig)
	if d, ok := carrier.(Deleter); ok {
		d.Delete(baggageHeader)
	}
	carrier.Set(baggageHeader, line.String())
	return nil
}

// appendSignature appends a session.sig value: v1.<key id>.<unix
// seconds>.<MAC>.
func appendSignature(b []byte, kid string, ts int64, sum *[macBytes]byte) []byte {
	b = append(b, signatureVersion...)
	b = append(b, '.')
	b = append(b, kid...)
	b = append(b, '.')
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, '.')
	return macEncoding.AppendEncode(b, sum[:])
}
