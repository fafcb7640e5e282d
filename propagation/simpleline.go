package propagation

import (
	"context"
	"net/url"
	"unicode/utf8"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/internal/stockprop"
)

// A baggage line as sessionwire's own outbound policies, and most other
// W3C implementations, write it is simple: members "key=value" joined by
// commas, without white space or properties, each value percent-encoded
// where it must be. OpenTelemetry's parser (baggage.Parse) spends most of
// an inbound step on such a line: it fills two maps grown from empty (the
// members and their sizes), and encodes every value it decoded again to
// measure it. For a simple line whose values decode to valid UTF-8, the
// baggage Parse returns is exactly the one baggage.New returns for the same
// members, each decoded as Parse decodes it (url.PathUnescape) and built by
// baggage.NewMemberRaw: OpenTelemetry's constructors, which still check
// every member and the W3C limits, without the rest of the parse. That
// costs 0.85 to 0.9 times the parse, and 5 allocations fewer for a full
// session (BenchmarkSimpleLine), and is what the inbound policy runs for a
// simple line; any other line goes to the propagator as it is.
// FuzzSimpleLineIsTheParsersBaggage holds the two to each other.
//
// Why the two agree: Parse trims white space (there is none), decodes each
// value and replaces bytes that are not UTF-8 (there are none once decoded),
// keeps the last of a key given twice, as baggage.New does, and stops at the
// member that takes the line past 64 members (there are at most 64) or its
// re-encoded members past 8192 bytes. A member encoded again is never longer
// than it came: a byte that came plain needs no escape, and one that came
// as "%XX" takes at most those three bytes again. So no running total of
// the parse exceeds the line's own length, at most 8192 bytes, and neither
// Parse nor baggage.New drops a member.

// simpleBaggage returns the baggage OpenTelemetry's parser returns for line,
// and true, when line is simple: one to otelsession.MaxBaggageMembers members
// "key=value", within otelsession.MaxBaggageBytes, each key a W3C token,
// each value of W3C baggage-octets whose percent-escapes decode to valid
// UTF-8, and no white space, property or empty member. It returns false for
// any other line, which the caller hands to the parser.
func simpleBaggage(line string) (baggage.Baggage, bool) {
	if line == "" || len(line) > otelsession.MaxBaggageBytes {
		return baggage.Baggage{}, false
	}
	// A session and the application's few members fit on the stack:
	// baggage.New only reads the slice, and copies what it keeps.
	var buf [32]baggage.Member
	members := buf[:0]
	for rest := line; ; {
		k := 0
		for k < len(rest) && keyByte[rest[k]] {
			k++
		}
		if k == 0 || k == len(rest) || rest[k] != '=' {
			return baggage.Baggage{}, false
		}
		v, escaped := k+1, false
		for ; v < len(rest); v++ {
			if c := rest[v]; !plainValueByte[c] {
				if c != '%' {
					break
				}
				escaped = true
			}
		}
		if len(members) == otelsession.MaxBaggageMembers {
			return baggage.Baggage{}, false
		}
		value := rest[k+1 : v]
		if escaped {
			var err error
			if value, err = url.PathUnescape(value); err != nil || !utf8.ValidString(value) {
				return baggage.Baggage{}, false
			}
		}
		m, err := baggage.NewMemberRaw(rest[:k], value)
		if err != nil {
			return baggage.Baggage{}, false
		}
		members = append(members, m)
		if v == len(rest) {
			break
		}
		if rest[v] != ',' || v+1 == len(rest) {
			return baggage.Baggage{}, false
		}
		rest = rest[v+1:]
	}
	b, err := baggage.New(members...)
	if err != nil {
		return baggage.Baggage{}, false
	}
	return b, true
}

// keyByte holds the bytes of a W3C baggage key, an RFC 9110 token: letters,
// digits and !#$%&'*+-.^_`|~.
var keyByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// extractLine is resetAndExtract for a carrier whose one baggage line,
// line, only OpenTelemetry's W3C propagator reads, through Get
// (stockprop.ReadsOneLine holds): a simple line's baggage is built by
// simpleBaggage (extractWith); any other line is the propagator's to
// parse.
func extractLine(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, line string) context.Context {
	b, ok := simpleBaggage(line)
	if !ok {
		return resetAndExtract(ctx, prop, carrier)
	}
	return extractWith(ctx, prop, carrier, b)
}

// extractWith is resetAndExtract for a carrier of which the policy already
// holds the baggage prop's W3C propagator would extract, b (built from a
// simple line, or derived from the cache's entry for the line): the
// context's own session Reset, then b put into the context the
// propagator's other parts extracted (stockprop.ExtractExceptBaggage). The
// context answers every key as resetAndExtract's would.
func extractWith(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, b baggage.Baggage) context.Context {
	if holdsSession(ctx) {
		ctx = otelsession.Reset(ctx)
	}
	return baggage.ContextWithBaggage(stockprop.ExtractExceptBaggage(ctx, prop, carrier), b)
}
