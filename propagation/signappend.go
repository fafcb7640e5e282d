package propagation

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/internal/ctxprobe"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/internal/stockprop"
)

// Signing without copying the baggage. Signer.SignFor adds the signature to
// the context's baggage with Baggage.SetMember, which copies the whole map
// (about a quarter of a signed Outbound.Inject), only for the propagator to
// write it out again. Where the injection is known to end as one W3C
// "baggage" entry holding the baggage's String, the signature member is
// appended to that entry instead: the same members reach the wire, in an
// order W3C leaves free. InjectContext returns a context whose signed
// baggage is built only when something reads it (withSignature). Anything
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
	if w3c, known := stockprop.Baggage(prop); !w3c || !known {
		return false
	}
	return checked || baggage.FromContext(out).Member(otelsession.SignatureKey).Key() == ""
}

// appendTo signs the session of out, which a propagator appendsSignature
// accepted has just injected into carrier, and appends the signature member
// to the carrier's baggage entry; it returns the signature's value. Should
// the carrier give back no baggage entry, it signs out itself, writes its
// baggage again and returns the signed context as resigned. On an error the
// carrier keeps the session unsigned, as SignFor's callers send it.
func (s *Signer) appendTo(out context.Context, carrier otelprop.TextMapCarrier, messageID string) (sig string, resigned context.Context, err error) {
	b := baggage.FromContext(out)
	if n := b.Len() + 1; n > otelsession.MaxBaggageMembers {
		return "", nil, fmt.Errorf("sign session: %d members, limit %d: %w", n, otelsession.MaxBaggageMembers, ErrSignatureNoRoom)
	}
	written := carrier.Get(baggageHeader)
	if written == "" {
		// Not what the W3C propagator writes for a baggage with a session
		// (a carrier that cannot read back what it was given): sign the
		// context instead and write its baggage again, the only entry that
		// depends on it, replacing what the first injection wrote.
		signed, err := s.SignFor(out, messageID)
		if err != nil {
			return "", nil, err
		}
		if d, ok := carrier.(Deleter); ok {
			d.Delete(baggageHeader)
		}
		otelprop.Baggage{}.Inject(signed, carrier)
		return "", signed, nil
	}
	var vals signedValues
	var sum [macBytes]byte
	ts, err := s.mac(b, messageID, &vals, &sum)
	if err != nil {
		return "", nil, fmt.Errorf("sign session: %w", err)
	}
	// The member, written last: the value is base64url, digits, dots and
	// the key id's letters, digits, "-" and "_", nothing W3C escapes.
	var line strings.Builder
	line.Grow(len(written) + 1 + len(otelsession.SignatureKey) + 1 + maxSignatureLen)
	line.WriteString(written)
	line.WriteByte(',')
	line.WriteString(otelsession.SignatureKey)
	line.WriteByte('=')
	valueAt := line.Len()
	var sigBuf [maxSignatureLen]byte
	line.Write(appendSignature(sigBuf[:0], s.key.id, ts, &sum))
	if n := line.Len(); n > otelsession.MaxBaggageBytes {
		return "", nil, fmt.Errorf("sign session: %d bytes, limit %d: %w", n, otelsession.MaxBaggageBytes, ErrSignatureNoRoom)
	}
	full := line.String()
	if d, ok := carrier.(Deleter); ok {
		d.Delete(baggageHeader)
	}
	carrier.Set(baggageHeader, full)
	return full[valueAt:], nil, nil
}

// withSignature returns out, whose baggage was sent with the signature sig
// appended, as a context whose baggage holds that signature too: what
// InjectContext returns, so that a transport handing it on (an HTTP
// request's copy, to a RoundTripper that injects again) sends what was
// sent. The signed baggage is built only when something reads it, since
// building it copies the whole baggage (Baggage.SetMember), and most
// requests go to a RoundTripper that never looks.
func withSignature(out context.Context, sig string) context.Context {
	c := &signedContext{Context: out, sig: sig}
	if baggageKey == nil {
		c.sign()
		return c.signed
	}
	return c
}

// signedContext is a context whose baggage is that of the embedded one with
// the member session.sig=sig added, built on first read. Every other value,
// the deadline and cancellation are the embedded context's.
type signedContext struct {
	context.Context
	sig    string
	once   sync.Once
	signed context.Context
}

func (c *signedContext) Value(key any) any {
	if key != baggageKey {
		return c.Context.Value(key)
	}
	c.once.Do(c.sign)
	return c.signed.Value(key)
}

func (c *signedContext) sign() {
	m, err := baggage.NewMemberRaw(otelsession.SignatureKey, c.sig)
	if err == nil {
		var nb baggage.Baggage
		if nb, err = baggage.FromContext(c.Context).SetMember(m); err == nil {
			c.signed = baggage.ContextWithBaggage(c.Context, nb)
			return
		}
	}
	// Cannot happen: the key is a constant token and the value was written
	// by appendSignature. Without its signature the session would be
	// refused downstream; without the session it is merely absent.
	c.signed = WithoutSession(c.Context)
}

func (c *signedContext) String() string { return fmt.Sprintf("%v.WithSignature", c.Context) }

// baggageKey is the key under which OpenTelemetry keeps a context's
// baggage (a value of an unexported type), found once by watching what
// baggage.FromContext asks a context for. It is nil when that is not
// exactly one comparable key under which ContextWithBaggage stores; then
// withSignature builds the signed context at once.
var baggageKey = func() any {
	key := ctxprobe.Key(func(ctx context.Context) { baggage.FromContext(ctx) })
	if key == nil {
		return nil
	}
	m, err := baggage.NewMemberRaw("k", "v")
	if err != nil {
		return nil
	}
	b, err := baggage.New(m)
	if err != nil || baggage.ContextWithBaggage(context.Background(), b).Value(key) == nil {
		return nil
	}
	return key
}()

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
