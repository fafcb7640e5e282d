package propagation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/internal/sessionmetrics"
	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/internal/carrierwrap"
	"github.com/sessionwire/sessionwire/propagation/internal/stockprop"
)

// Errors of the inbound path. Each wraps into the error [Inbound.Extract]
// returns, so callers can count them apart with errors.Is.
var (
	// ErrBaggageTooLarge: the baggage headers together exceed a W3C limit:
	// 8192 bytes, or, beside a session, 64 members or 8192 bytes as the OTel
	// SDK counts them after decoding (past those it drops members in map
	// order, so the same input could be accepted on one request and not on
	// the next).
	ErrBaggageTooLarge = errors.New("baggage exceeds the W3C limits (8192 bytes, 64 members)")
	// ErrMalformedMember: a session member is not valid W3C baggage, so the
	// propagator dropped it (a session would otherwise arrive half-built).
	ErrMalformedMember = errors.New("malformed session member")
	// ErrDuplicateMember: a session key appears more than once, in one header
	// or across several (two values for one field: which one is the truth?).
	ErrDuplicateMember = errors.New("session member repeated")
	// ErrInvalidValue is otelsession.ErrInvalidValue: the one value rule
	// (otelsession.ValidateValue) refused an identity value: too long for its
	// key, a control character (CR, LF, NUL other than the Cleared marker,
	// …), bytes that were not valid UTF-8. Bind refuses exactly the same
	// values.
	ErrInvalidValue = otelsession.ErrInvalidValue
	// ErrLocalField is otelsession.ErrLocalField: a field that never leaves
	// a process (UI session id, browser control, working directory) arrived
	// from the network.
	ErrLocalField = otelsession.ErrLocalField
	// ErrUnknownSessionKey is otelsession.ErrUnknownSessionKey: a member in
	// the session namespace that the wire-key table does not know in its
	// canonical spelling (session.future, SESSION.chat_id,
	// session%2Echat_id, which an SDK that decodes keys would turn into
	// session.chat_id).
	ErrUnknownSessionKey = otelsession.ErrUnknownSessionKey
	// ErrNoBaggagePropagator: a session arrived, but the propagator the
	// receiver extracts with does not read baggage (its Fields have no
	// "baggage": otel.SetTextMapPropagator was given TraceContext alone, or
	// never called). A configuration error, not the sender's: nothing is
	// counted against the input.
	ErrNoBaggagePropagator = errors.New("the propagator does not read baggage")
)

// Peer describes where a carrier came from, for a [TrustFunc].
type Peer struct {
	// Transport names the boundary: "http", "nats", "env", …
	Transport string
	// Addr is the peer's network address when the transport has one (the
	// remote address of an HTTP request); the zero Addr otherwise.
	Addr netip.Addr
	// Name identifies the source within the transport: the request's Host,
	// a NATS subject, …
	Name string
	// MessageID is what a signature on this carrier is bound to: on the
	// queues, the transport's name, the destination (a NATS subject; a
	// Kafka topic; an AMQP exchange and routing key) and the message's id
	// when it has one (NATS's Nats-Msg-Id header, Kafka's message-id
	// header, AMQP's MessageId), so never "" there; "" where nothing binds a
	// signature (HTTP, gRPC, a child process's environment). A signature is
	// verified against it, so a signed session cannot be moved onto another
	// message, destination or transport; see [Signer.SignFor].
	MessageID string
}

// TrustFunc decides whether a peer may set the session. It is the server's
// decision, never the peer's.
type TrustFunc func(ctx context.Context, p Peer) bool

// TrustNone trusts no peer: every inbound session is stripped. It is the
// default.
func TrustNone(context.Context, Peer) bool { return false }

// TrustAll trusts every peer. Use it only where the transport authenticates
// publishers itself (a NATS account only the gateway can publish to, a child
// process this process started).
func TrustAll(context.Context, Peer) bool { return true }

// TrustPrefixes trusts peers whose address is in one of prefixes, such as
// netip.MustParsePrefix("10.1.0.0/16"). IPv4-mapped IPv6 addresses are
// compared as IPv4. A peer without an address is not trusted.
func TrustPrefixes(prefixes ...netip.Prefix) TrustFunc {
	ps := append([]netip.Prefix(nil), prefixes...)
	return func(_ context.Context, p Peer) bool {
		addr := p.Addr.Unmap()
		for _, pre := range ps {
			if addr.IsValid() && pre.Contains(addr) {
				return true
			}
		}
		return false
	}
}

// TrustLoopback trusts peers on the loopback interface (127.0.0.0/8, ::1).
func TrustLoopback() TrustFunc {
	return func(_ context.Context, p Peer) bool { return p.Addr.Unmap().IsLoopback() }
}

// Counts is a snapshot of what an [Inbound] policy has seen.
type Counts struct {
	Accepted  uint64 // sessions accepted, from a trusted peer or on their signature
	Untrusted uint64 // sessions stripped because the peer is not trusted and they were not signed
	Rejected  uint64 // sessions refused as malformed; see the reasons below
	// Refusals by reason (a carrier can have several).
	TooLarge, Malformed, Duplicate, InvalidValue, LocalField, UnknownSessionKey uint64

	// Truncated counts accepted sessions in which a display value (chat or
	// user name) was cut to its limit or dropped: the session was kept.
	Truncated uint64

	// Cached counts the accepted sessions served from the policy's cache
	// of accepted lines (see [WithCacheSize]): counted in Accepted too.
	Cached uint64
	// CachedNoSession counts the baggage lines that named no session (only
	// the application's own members) whose baggage was served from the
	// policy's cache: a line seen before, byte for byte (see
	// [WithCacheSize]). They are not counted elsewhere.
	CachedNoSession uint64

	// Signed counts the accepted sessions whose signature verified (see
	// [WithVerifier]), whatever the peer.
	Signed uint64
	// Sessions stripped because their signature failed, by reason: malformed
	// or not matching (ErrBadSignature), outside the window
	// (ErrSignatureExpired), made with a key the verifier does not hold
	// (ErrUnknownKey). They are not counted in Rejected.
	BadSignature, Expired, UnknownKey uint64
}

// Inbound is the trust policy for sessions arriving from outside the process.
// Use one per boundary (an HTTP server, a consumer) with [NewInbound]; it is
// safe for concurrent use.
type Inbound struct {
	trust    TrustFunc
	verifier *Verifier
	cache    *inboundCache
	n        struct {
		accepted, untrusted, rejected, cached, cachedNoSession                      atomic.Uint64
		tooLarge, malformed, duplicate, invalidValue, localField, unknownSessionKey atomic.Uint64
		signed, badSignature, expired, unknownKey, truncated                        atomic.Uint64
	}
}

// InboundOption configures an [Inbound] policy.
type InboundOption func(*Inbound)

// WithVerifier makes the policy check session signatures (the session.sig
// member a [Signer] writes) with v:
//
//   - from a peer the TrustFunc does not trust, a session is accepted only
//     when it carries a signature that verifies with one of v's keys, over
//     exactly the session members that arrived, for this carrier's message
//     ([Peer.MessageID]), with an issue time inside v's window. Without a
//     signature it is stripped as untrusted, as without a verifier;
//   - from a trusted peer, a session without a signature is accepted as
//     without a verifier, but one whose signature is present and fails is
//     refused: a failing signature means the session was changed after it
//     was signed, or is being replayed, whoever relays it.
//
// A failed signature strips the session (wholly Unset, signature removed),
// is counted by reason (Counts.BadSignature, Expired, UnknownKey), reaches
// otel.Handle once per reason and process, and is returned by Extract as an
// error wrapping ErrBadSignature, ErrSignatureExpired or ErrUnknownKey. A nil
// v checks nothing.
func WithVerifier(v *Verifier) InboundOption {
	return func(p *Inbound) { p.verifier = v }
}

// NewInbound returns a policy that accepts sessions from peers trust approves
// of, and, with [WithVerifier], signed sessions from any peer. A nil trust is
// [TrustNone].
func NewInbound(trust TrustFunc, opts ...InboundOption) *Inbound {
	if trust == nil {
		trust = TrustNone
	}
	p := &Inbound{trust: trust, cache: newInboundCache(defaultInboundCacheSize)}
	for _, o := range opts {
		if o != nil {
			o(p)
		}
	}
	return p
}

// readsBaggage reports whether prop extracts the W3C baggage header.
func readsBaggage(prop otelprop.TextMapPropagator) bool {
	return slices.ContainsFunc(prop.Fields(), func(f string) bool { return strings.EqualFold(f, baggageHeader) })
}

// Trusts reports whether the policy trusts peer itself: whether a session
// it sends is accepted without a signature. A transport whose peer also
// writes other session input beside the carrier (a parent process writes the
// legacy HERMES_* variables beside BAGGAGE) reads that input only from a
// peer the policy trusts. A nil policy trusts no peer.
func (p *Inbound) Trusts(ctx context.Context, peer Peer) bool {
	return p != nil && p.trust(ctx, peer)
}

// nilInbound is what a nil *Inbound applies: NewInbound(nil), trusting no
// peer, with counts of its own.
var nilInbound = NewInbound(nil)

// Counts returns what the policy has seen so far; a nil policy's, nothing.
func (p *Inbound) Counts() Counts {
	if p == nil {
		return Counts{}
	}
	return Counts{
		Accepted: p.n.accepted.Load(), Untrusted: p.n.untrusted.Load(), Rejected: p.n.rejected.Load(),
		TooLarge: p.n.tooLarge.Load(), Malformed: p.n.malformed.Load(), Duplicate: p.n.duplicate.Load(),
		InvalidValue: p.n.invalidValue.Load(), LocalField: p.n.localField.Load(),
		UnknownSessionKey: p.n.unknownSessionKey.Load(), Truncated: p.n.truncated.Load(),
		Cached: p.n.cached.Load(), CachedNoSession: p.n.cachedNoSession.Load(), Signed: p.n.signed.Load(), BadSignature: p.n.badSignature.Load(), Expired: p.n.expired.Load(),
		UnknownKey: p.n.unknownKey.Load(),
	}
}

const baggageHeader = "baggage"

// canonicalBaggage is baggageHeader as net/http stores it.
var canonicalBaggage = http.CanonicalHeaderKey(baggageHeader)

// Extract is the whole inbound path. It Resets the session of ctx (work
// never inherits whatever the caller's base context held), extracts carrier
// with prop (otel.GetTextMapPropagator() when nil), then applies the policy:
// a well-formed session from a trusted peer, or one whose signature verifies
// (see [WithVerifier]), is kept; from any other peer its members are removed
// and counted. Malformed input or a failed signature returns a context whose
// session is wholly Unset and an error naming the transport, never a value.
// Trace context and baggage members that are not session fields are left as
// the propagator extracted them in every case.
//
// The signature member (session.sig) belongs to the session: it is kept
// when the session is accepted, so that the next hop can verify it too, and
// removed with the session otherwise. Two of them, or a malformed one, refuse
// the session even without a verifier. A signature on a carrier that binds
// it (Peer.MessageID is not "": every NATS message, Kafka record and AMQP
// message) is bound to that message or destination and is removed once the
// session is accepted: no next hop binds the same, so it could verify
// nowhere else.
//
// A nil policy is NewInbound(nil)'s: it trusts no peer. A nil carrier
// returns ctx Reset and an error; a nil ctx is context.Background().
func (p *Inbound) Extract(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, peer Peer) (context.Context, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if p == nil {
		p = nilInbound
	}
	if carrier == nil {
		return otelsession.Reset(ctx), fmt.Errorf("extract session from %s: nil carrier", peer.Transport)
	}
	if prop == nil {
		prop = otel.GetTextMapPropagator()
	}
	var raw []string
	extractFrom := carrier
	switch c := carrier.(type) {
	case otelprop.HeaderCarrier:
		// What c.Values(baggageHeader) returns, without canonicalising the
		// name again on every request.
		raw = c[canonicalBaggage]
		if len(raw) == 1 && singleValued(c) {
			// Its own type: a map fits in an interface without allocating.
			extractFrom = headerWithoutValues{c}
		}
	case otelprop.ValuesGetter:
		raw = c.Values(baggageHeader)
		if s, ok := carrier.(singleValuer); ok && len(raw) == 1 && s.SingleValued() {
			extractFrom = carrierwrap.WithoutValues{C: carrier}
		}
	default:
		if v := carrier.Get(baggageHeader); v != "" {
			raw = []string{v}
		}
	}
	// With one baggage line that only OpenTelemetry's W3C propagator
	// reads (through Get: no Values method), the session members of the
	// extracted baggage are exactly those of the line, decoded; the check
	// then reads a plain value from the line instead of looking it up, and
	// a simple line's baggage is built without OpenTelemetry's parse, with
	// the same result (extractLine, simpleline.go).
	var written *writtenMembers
	if len(raw) == 1 && stockprop.ReadsOneLine(prop, extractFrom) {
		// A line that names no session key in any spelling, within the
		// size limit (stockprop.NoSession's rule), holds no session once
		// extracted: the raw scan would find no key of the namespace and
		// the check nothing to check (the context's own session was Reset
		// above), and the peer is not consulted. A message or call that
		// carries only the application's own baggage is returned as
		// extracted (FuzzCheckReadsTheLineAsTheParserDoes holds the two
		// ways to each other).
		if stockprop.NamesNoSession(raw[0]) {
			return p.extractQuiet(ctx, prop, extractFrom, raw[0]), nil
		}
		written = new(writtenMembers)
	}
	seen, err := scanSessionKeys(raw, written)
	// The scan reads the raw line only, so it runs before the extraction:
	// a line the cache of accepted sessions holds but for its message id
	// needs no parse (see inboundcache.go).
	var key *lineKey
	if written != nil && err == nil && seen != 0 && p.cache != nil {
		key = new(lineKey)
		if !p.cache.keyOf(key, raw[0], seen, written, p.verifier != nil && peer.MessageID != "") {
			key = nil
		} else if c, ok, err := p.fromCache(ctx, prop, extractFrom, key, peer); ok {
			return c, err
		}
	}
	if written != nil {
		ctx = extractLine(ctx, prop, extractFrom, raw[0])
	} else {
		ctx = resetAndExtract(ctx, prop, extractFrom)
	}
	if err == nil && seen != 0 && mayGrowPastLimit(raw) {
		err = checkReencodedSize(raw)
	}
	var in inboundSession
	if err == nil {
		err = in.check(baggage.FromContext(ctx), seen, len(raw) == 0, written)
	}
	if errors.Is(err, ErrMalformedMember) && !readsBaggage(prop) {
		// Every member the header named is missing because nothing read
		// the header: say so, rather than blame the sender's members.
		fields := "it reads no header: the OTel global until otel.SetTextMapPropagator is called"
		if f := prop.Fields(); len(f) > 0 {
			fields = "it reads " + strings.Join(f, ", ")
		}
		err = fmt.Errorf("extract session from %s: %w (%s): set otel.SetTextMapPropagator("+
			"propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})), or pass one with propagation.Baggage{}",
			peer.Transport, ErrNoBaggagePropagator, fields)
		reportOnce(err)
		return otelsession.Reset(ctx), err
	}
	if err != nil {
		p.n.rejected.Add(1)
		p.countReason(err, peer.Transport)
		reportOnce(err)
		return otelsession.Reset(ctx), fmt.Errorf("extract session from %s: %w", peer.Transport, err)
	}
	if !in.present {
		return ctx, nil
	}
	if ctx, ok, err := p.decide(ctx, &in, peer); !ok {
		return ctx, err
	}
	if in.hasSig && peer.MessageID != "" {
		ctx = withoutSignature(ctx)
	}
	if len(in.display) > 0 {
		// Cut after the signature was verified over what was sent.
		ctx = p.normalizeDisplay(ctx, in.display)
	}
	var line string
	if written != nil {
		line = raw[0] // the check read the session's values from it
	}
	rc := in.withRecord(ctx, line)
	if key != nil && len(in.display) == 0 {
		p.cache.remember(key, rc.R.B, &rc.R, &in.vals)
	}
	return rc, nil
}

// decide judges a well-formed session in ctx, which the check read into
// in: its signature, then, unless the signature verified, the peer. It
// counts the outcome and returns ctx and true when the session is
// accepted, or what Extract returns and false: the context with the
// session Reset, and the error of a failed signature.
func (p *Inbound) decide(ctx context.Context, in *inboundSession, peer Peer) (context.Context, bool, error) {
	if in.hasSig {
		if err := p.judgeSignature(in, peer); err != nil {
			p.countSignature(err, peer.Transport)
			reportOnce(err)
			return otelsession.Reset(ctx), false, fmt.Errorf("extract session from %s: %s: %w", peer.Transport, otelsession.SignatureKey, err)
		}
	}
	if in.hasSig && p.verifier != nil {
		p.n.signed.Add(1)
	} else if !p.trust(ctx, peer) {
		p.n.untrusted.Add(1)
		sessionmetrics.Inbound(peer.Transport, "untrusted", "")
		return otelsession.Reset(ctx), false, nil
	}
	p.n.accepted.Add(1)
	sessionmetrics.Inbound(peer.Transport, "accepted", "")
	return ctx, true, nil
}

// withRecord returns ctx holding the record of what its baggage, an
// accepted session's, holds of the session's fields: the values the check
// read (and, for a display value that was cut, the baggage's own). Lookup,
// Getenv and the span and log processors then read the session from it
// instead of looking each field up (sessionstate.Record): a worker reads
// the session of the message it handles again and again. An outbound
// policy that sends the session on takes it as checked (acceptedSession)
// and writes its line from the record (sessionstate.WireLine) unless
// Props says its members may carry properties. line, when not "", is the
// one baggage line the check read the session's values from: they are
// spans of it, which the record holds as such (sessionstate.Spans), in
// half the bytes of a value each.
func (in *inboundSession) withRecord(ctx context.Context, line string) *sessionstate.RecordContext {
	b := baggage.FromContext(ctx)
	var rc *sessionstate.RecordContext
	if line != "" {
		rc = &sessionstate.RecordContext{Context: ctx}
		rc.R.WriteSpans(&rc.S, line)
	} else {
		rc = sessionstate.NewRecordContext(ctx)
	}
	r := &rc.R
	r.B = b
	// A member's properties follow a ';', which no value holds unescaped.
	r.Props = line == "" || strings.IndexByte(line, ';') >= 0
	sessionstate.Recorded(b)
	for i := range fieldKeys {
		if pos := signedPos[i]; pos >= 0 && in.vals[pos].ok {
			r.SetFromBaggage(i, in.vals[pos].v)
		}
	}
	for _, d := range in.display {
		if c := classify(d.key); c != nil && c.spec.Field != 0 {
			i := int(c.spec.Field) - 1
			r.SetUnset(i)
			if m := b.Member(d.key); m.Key() != "" {
				r.SetFromBaggage(i, m.Value())
			}
		}
	}
	return rc
}

// singleValued reports whether no entry of h has more than one value.
func singleValued(h otelprop.HeaderCarrier) bool {
	for _, vs := range h {
		if len(vs) > 1 {
			return false
		}
	}
	return true
}

// singleValuer is a carrier with a Values method that can tell when no key
// has more than one value (the queue transports' carriers can).
type singleValuer interface{ SingleValued() bool }

// headerWithoutValues is carrierwrap.WithoutValues for an http.Header, in
// a type of its own: a map fits in an interface without allocating.
type headerWithoutValues struct{ h otelprop.HeaderCarrier }

func (w headerWithoutValues) Get(key string) string { return w.h.Get(key) }
func (w headerWithoutValues) Set(key, value string) { w.h.Set(key, value) }
func (w headerWithoutValues) Keys() []string        { return w.h.Keys() }

// normalizeDisplay replaces display values that the table cuts or drops,
// as Bind would have: the session is kept.
func (p *Inbound) normalizeDisplay(ctx context.Context, notes []displayFix) context.Context {
	b := baggage.FromContext(ctx)
	for _, f := range notes {
		v := f.value
		outcome := "truncated"
		if v == "" {
			v, outcome = otelsession.ClearedValue, "dropped"
		}
		if m, err := baggage.NewMemberRaw(f.key, v); err == nil {
			if nb, err := b.SetMember(m); err == nil {
				b = nb
			}
		}
		p.n.truncated.Add(1)
		sessionmetrics.Value(f.key, outcome, "inbound")
	}
	return baggage.ContextWithBaggage(ctx, b)
}

// displayFix is a display value to replace.
type displayFix struct{ key, value string }

// judgeSignature verifies the signature of in when the policy has a
// verifier. Without one the signature is opaque, but it must still be one:
// the member is reserved, and a malformed one is tampering or a bug.
func (p *Inbound) judgeSignature(in *inboundSession, peer Peer) error {
	if p.verifier != nil {
		return p.verifier.check(in.sig, peer.MessageID, &in.vals)
	}
	_, err := parseSignature(in.sig)
	return err
}

func (p *Inbound) countSignature(err error, transport string) {
	reason := "bad_signature"
	switch {
	case errors.Is(err, ErrUnknownKey):
		p.n.unknownKey.Add(1)
		reason = "unknown_signing_key"
	case errors.Is(err, ErrSignatureExpired):
		p.n.expired.Add(1)
		reason = "signature_expired"
	default:
		p.n.badSignature.Add(1)
	}
	sessionmetrics.Inbound(transport, "refused", reason)
}

func (p *Inbound) countReason(err error, transport string) {
	for _, r := range []struct {
		err    error
		n      *atomic.Uint64
		reason string
	}{
		{ErrBaggageTooLarge, &p.n.tooLarge, "too_large"}, {ErrMalformedMember, &p.n.malformed, "malformed"},
		{ErrDuplicateMember, &p.n.duplicate, "duplicate"}, {ErrInvalidValue, &p.n.invalidValue, "invalid_value"},
		{ErrLocalField, &p.n.localField, "local_field"}, {ErrUnknownSessionKey, &p.n.unknownSessionKey, "unknown_key"},
	} {
		if errors.Is(err, r.err) {
			r.n.Add(1)
			sessionmetrics.Inbound(transport, "refused", r.reason)
		}
	}
}

// Hostile input could otherwise flood the logs: each kind of refusal reaches
// otel.Handle once per process; all of them are counted.
var reported sync.Map // error kind -> struct{}

func reportOnce(err error) {
	for _, kind := range []error{ErrBaggageTooLarge, ErrMalformedMember, ErrDuplicateMember, ErrInvalidValue, ErrLocalField,
		ErrUnknownSessionKey, ErrBadSignature, ErrSignatureExpired, ErrUnknownKey, ErrNoBaggagePropagator} {
		if errors.Is(err, kind) {
			if _, loaded := reported.LoadOrStore(kind, struct{}{}); !loaded {
				what := "inbound session refused"
				if kind == ErrNoBaggagePropagator {
					what = "inbound session not read"
				}
				otel.Handle(fmt.Errorf("sessionwire: %s (reported once per kind): %w", what, err))
			}
			return
		}
	}
}

// scanSessionKeys locates the session keys in the raw baggage headers, without
// decoding them (the OTel parser does that), to catch what the parser would
// silently resolve: total size over the limit, a session key given twice
// (last-one-wins would pick one), a session member the parser drops. When
// written is not nil, it records what follows each session key it finds.
func scanSessionKeys(lines []string, written *writtenMembers) (keySet, error) {
	total := len(lines) - 1
	for _, l := range lines {
		total += len(l)
	}
	if total > otelsession.MaxBaggageBytes {
		return 0, fmt.Errorf("%d bytes: %w", total, ErrBaggageTooLarge)
	}
	var seen keySet
	var errs []error
	members := 0
	for _, line := range lines {
		for rest := line; rest != ""; {
			// One pass over the member: its key (memberKey's), then a
			// vectorised search for the comma that ends it.
			end := 0
			for end < len(rest) && !keyEnds[rest[end]] {
				end++
			}
			next := end
			if end < len(rest) && rest[end] != ',' {
				if i := strings.IndexByte(rest[end:], ','); i >= 0 {
					next += i
				} else {
					next = len(rest)
				}
			}
			m := rest[:next]
			if next < len(rest) {
				rest = rest[next+1:]
			} else {
				rest = ""
			}
			key := trimSpace(m[:end])
			if key != "" || strings.TrimSpace(m) != "" {
				members++
			}
			c := classify(key)
			switch {
			case c == nil && otelsession.OwnedKey(key):
				errs = append(errs, fmt.Errorf("%q: %w", key, ErrUnknownSessionKey))
				continue
			case c == nil:
				continue
			case c.local():
				errs = append(errs, fmt.Errorf("%s: %w", key, ErrLocalField))
				continue
			case seen&c.bit != 0:
				errs = append(errs, fmt.Errorf("%s: %w", key, ErrDuplicateMember))
			}
			seen |= c.bit
			if written != nil {
				written.rest[c.idx], written.last = m[end:], c.idx
			}
		}
	}
	if members > otelsession.MaxBaggageMembers && seen != 0 {
		errs = append(errs, fmt.Errorf("%d members, limit %d: %w", members, otelsession.MaxBaggageMembers, ErrBaggageTooLarge))
	}
	return seen, joinListed(errs)
}

// maxListed bounds how many members an error names: a hostile header holds
// up to 64, and an error is logged.
const maxListed = 8

// joinListed is errors.Join of errs, naming the first maxListed; the rest
// are counted, and still match their kinds with errors.Is.
func joinListed(errs []error) error {
	if len(errs) <= maxListed {
		return errors.Join(errs...)
	}
	rest := errs[maxListed:]
	format, kinds := "and %d more like them (", []any{len(rest)}
	for _, kind := range []error{ErrBaggageTooLarge, ErrMalformedMember, ErrDuplicateMember, ErrInvalidValue, ErrLocalField, ErrUnknownSessionKey} {
		if slices.ContainsFunc(rest, func(e error) bool { return errors.Is(e, kind) }) {
			if len(kinds) > 1 {
				format += "; "
			}
			format += "%w"
			kinds = append(kinds, kind)
		}
	}
	return errors.Join(append(errs[:maxListed:maxListed], fmt.Errorf(format+")", kinds...))...)
}

// keyEnds marks the bytes that end a raw member's key: "=", ";" and ",".
var keyEnds = [256]bool{'=': true, ';': true, ',': true}

// trimSpace is strings.TrimSpace, without its work for the common case of
// a key that starts and ends with a printable ASCII byte.
func trimSpace(s string) string {
	if s != "" && s[0] > ' ' && s[0] < 0x7f && s[len(s)-1] > ' ' && s[len(s)-1] < 0x7f {
		return s
	}
	return strings.TrimSpace(s)
}

// Bytes that are not UTF-8 become U+FFFD when the OTel parser decodes a
// value, and "%FF" (3 bytes) is then encoded again as "%EF%BF%BD" (9 bytes).
// Headers under 8192 bytes can so exceed it once parsed; the SDK then drops
// members of several header lines in map order, and the same input would be
// accepted on one request and refused on the next, and the members of one
// line past the limit, so whether a session member survived depended on
// where it was written. Both are refused as too large. Nothing else grows.
const maxGrowth = 6 // extra bytes per escaped byte >= 0x80

// mayGrowPastLimit cheaply bounds the re-encoded size of lines from above.
func mayGrowPastLimit(lines []string) bool {
	total := len(lines) - 1
	for _, l := range lines {
		total += len(l) + growthBound(l)
	}
	return total > otelsession.MaxBaggageBytes
}

// growthBound bounds from above how many bytes line grows by once its
// members are decoded and encoded again: maxGrowth for each escaped byte
// that is not ASCII.
func growthBound(l string) int {
	n := 0
	for i := strings.IndexByte(l, '%'); i >= 0 && i+1 < len(l); {
		if c := l[i+1]; c >= '8' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' {
			n += maxGrowth
		}
		j := strings.IndexByte(l[i+1:], '%')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return n
}

// otelTooLarge is the error baggage.Parse wraps when its members outgrow
// 8192 bytes once encoded again, taken from Parse itself: it is not
// exported.
var otelTooLarge = func() error {
	_, err := baggage.Parse(strings.Repeat("a", otelsession.MaxBaggageBytes+1))
	return errors.Unwrap(err)
}()

// checkReencodedSize measures what the SDK measures before it drops members:
// the members of all lines, last one wins, each encoded again.
func checkReencodedSize(lines []string) error {
	size := make(map[string]int)
	for _, l := range lines {
		b, err := baggage.Parse(l)
		if errors.Is(err, otelTooLarge) {
			// The parser kept the members before the limit and dropped
			// the rest, so the sum below would stay under it.
			return fmt.Errorf("a line over %d bytes once decoded and encoded again: %w", otelsession.MaxBaggageBytes, ErrBaggageTooLarge)
		}
		for _, m := range b.Members() {
			size[m.Key()] = len(m.String())
		}
	}
	total := len(size) - 1
	for _, n := range size {
		total += n
	}
	if total > otelsession.MaxBaggageBytes {
		return fmt.Errorf("%d bytes once decoded and encoded again: %w", total, ErrBaggageTooLarge)
	}
	return nil
}

// keySet is a set of session keys: bit f for Field f (fields start at 1),
// bit 0 for the async-delivery key, the top bit for the signature. A set, not
// a map, because it is built for every inbound carrier.
type keySet uint64

const (
	asyncBit keySet = 1
	sigBit   keySet = 1 << 63
)

// Every field needs its own bit between the async and signature bits: the
// table may grow to 62 fields before this fails to compile.
var _ [62 - otelsession.NumFields]struct{}

func fieldBit(f otelsession.Field) keySet { return 1 << f }

// keyClass is what the raw scan needs to know of a session key.
type keyClass struct {
	spec otelsession.Spec
	bit  keySet
	idx  uint8 // its slot in writtenMembers: the field, 0 for async, sigIdx
}

// sigIdx is the signature's slot in writtenMembers.
const sigIdx = uint8(otelsession.NumFields + 1)

func (c *keyClass) local() bool { return c.spec.Class == otelsession.ClassLocal }

// fieldKeys describes every field, in Field order.
var fieldKeys = func() []keyClass {
	var ks []keyClass
	for _, f := range otelsession.Fields() {
		ks = append(ks, keyClass{f.Spec(), fieldBit(f), uint8(f)})
	}
	return ks
}()

// keysByLen holds every row of the wire-key table by key length: the raw
// scan looks up every member's key, and comparing a few keys of the same
// length costs less than hashing it.
var keysByLen = func() [][]keyClass {
	var t [][]keyClass
	for _, s := range otelsession.Specs() {
		c := keyClass{spec: s}
		switch {
		case s.Field != 0:
			c.bit, c.idx = fieldBit(s.Field), uint8(s.Field)
		case s.Key == otelsession.AsyncDeliveryKey:
			c.bit, c.idx = asyncBit, 0
		case s.Key == otelsession.SignatureKey:
			c.bit, c.idx = sigBit, sigIdx
		}
		for len(t) <= len(s.Key) {
			t = append(t, nil)
		}
		t[len(s.Key)] = append(t[len(s.Key)], c)
	}
	return t
}()

// classify returns the row of key, nil when the table does not know it. It
// runs for every member of every inbound header: it returns a pointer into
// the table rather than a copy of the row, and finds it with one comparison
// of the whole key (see keyHash).
func classify(key string) *keyClass {
	const p = otelsession.KeyPrefix
	if len(key) <= len(p) || key[:len(p)] != p {
		return nil
	}
	if keyHashMul == 0 {
		return classifySlow(key)
	}
	if c := keysByHash[keyHash(key, keyHashMul)]; c != nil && c.spec.Key == key {
		return c
	}
	return nil
}

// classifySlow is classify by comparing key with every row of its length.
func classifySlow(key string) *keyClass {
	if len(key) >= len(keysByLen) {
		return nil
	}
	row := keysByLen[len(key)]
	for i := range row {
		if row[i].spec.Key == key {
			return &row[i]
		}
	}
	return nil
}

// keyHash hashes a key that follows the prefix for keysByHash: its length,
// the byte after the prefix and its last two bytes, which tell the table's
// keys apart, mixed by a multiplier chosen at start (keysByHash).
func keyHash(key string, mul uint32) uint8 {
	n := len(key)
	w := uint32(n)<<24 | uint32(key[len(otelsession.KeyPrefix)])<<16 | uint32(key[n-2])<<8 | uint32(key[n-1])
	return uint8((w * mul) >> 24)
}

// keysByHash is every row of the wire-key table at its keyHash, with a
// multiplier for which no two keys collide; keyHashMul is that multiplier.
// Should no multiplier tried separate them (a table grown past what these
// bytes tell apart), keyHashMul is 0 and classify compares keys of the same
// length instead (TestClassifyFindsEveryKeyByHash fails first).
var keysByHash, keyHashMul = func() (t [256]*keyClass, mul uint32) {
	for mul = 0x9e3779b1; mul < 0x9e3779b1+1<<16; mul += 2 {
		t = [256]*keyClass{}
		ok := true
		for _, row := range keysByLen {
			for i := range row {
				h := keyHash(row[i].spec.Key, mul)
				if t[h] != nil {
					ok = false
					break
				}
				t[h] = &row[i]
			}
		}
		if ok {
			return t, mul
		}
	}
	return [256]*keyClass{}, 0
}()

// writtenMembers is what the raw scan found after each session key of the
// one baggage line the W3C propagator parsed ("=value", possibly with
// properties), by keyClass.idx, and which session member came last.
type writtenMembers struct {
	rest [sigIdx + 1]string
	last uint8
}

// plainValue returns the value OpenTelemetry's parser decodes from rest,
// what follows a key in a raw member, when that needs no decoding at all:
// "=" then, around white space the parser trims, only characters of a W3C
// value other than "%" (so nothing to unescape, and valid UTF-8), and no
// properties. ok is false for anything else, which the check looks up in
// the extracted baggage instead.
func plainValue(rest string) (v string, ok bool) {
	if rest == "" || rest[0] != '=' {
		return "", false
	}
	v = trimSpace(rest[1:])
	for i := 0; i < len(v); i++ {
		if !plainValueByte[v[i]] {
			return "", false
		}
	}
	return v, true
}

// plainValueByte holds the W3C baggage-octets (RFC 9110 tchar and the rest
// of the W3C grammar: 0x21, 0x23-0x2B, 0x2D-0x3A, 0x3C-0x5B, 0x5D-0x7E),
// "%" left out: a value made of them alone is its own decoding.
var plainValueByte = func() (t [256]bool) {
	for c := 0x21; c <= 0x7e; c++ {
		t[c] = c != '"' && c != ',' && c != ';' && c != '\\' && c != '%'
	}
	return t
}()

// inboundSession is what the policy read of the session in an extracted
// baggage.
type inboundSession struct {
	present bool         // any session member, the signature included
	hasSig  bool         // a session.sig member
	sig     string       // its value
	vals    signedValues // what a signature covers, for the verifier
	display []displayFix // display values to cut or drop once accepted
}

// check validates the session members of the extracted baggage: every key
// seen in the raw headers must have survived parsing, and every value must be
// one Bind could have produced (otelsession.ValidateValue). When the
// propagator read no raw baggage header (another format), the extracted
// members are searched for strays in the session namespace instead. The
// signature is judged later, once the session is known to be well formed.
//
// written, when not nil, is the raw scan's record of the one line
// OpenTelemetry's W3C propagator alone parsed into b (see Inbound.Extract).
// A member whose written value is plain (plainValue) is then read from the
// line: the parser keeps every valid member in order and stops only at its
// limits, so once the member written last is found in b with the value
// written, every plain session member before it is in b as written, and no
// session member the line did not name can be (the context's own session
// was Reset before the extraction). Should that member be missing or differ,
// the check looks every member up, as without written. A line that named no
// session key (seen is 0) needs no look-up at all: b holds only the line's
// members, none of them the session's, or the context's own (Reset).
func (in *inboundSession) check(b baggage.Baggage, seen keySet, noRaw bool, written *writtenMembers) error {
	if b.Len() == 0 && seen == 0 {
		return nil
	}
	if written != nil && seen != 0 {
		last := written.keyOf(written.last)
		m := b.Member(last)
		if v, plain := plainValue(written.rest[written.last]); m.Key() == "" || plain && m.Value() != v {
			written = nil
		}
	}
	var errs []error
	known, n := 0, b.Len()
	// The rows the raw headers named are looked up first. Once every member
	// of b is accounted for, the rows left cannot be present: they are not
	// looked up, only checked against what the raw headers held. A member
	// left over (an application's own, or a session member another
	// propagator of a composite extracted) sends the second pass through
	// the rows the headers did not name; with written, there are none.
	for pass := 0; pass < 2; pass++ {
		if pass == 1 && written != nil {
			break
		}
		for i := range fieldKeys {
			c := &fieldKeys[i]
			if (seen&c.bit != 0) != (pass == 0) {
				continue
			}
			key, v, plain := in.member(b, c, seen, written, known < n)
			if key == "" {
				if seen&c.bit != 0 {
					errs = append(errs, fmt.Errorf("%s: %w", c.spec.Key, ErrMalformedMember))
				}
				continue
			}
			known++
			in.present = true
			if c.local() {
				// Only reachable through a propagator other than W3C baggage.
				errs = append(errs, fmt.Errorf("%s: %w", c.spec.Key, ErrLocalField))
				continue
			}
			// A plain value is printable ASCII: only its length can be wrong.
			if v != otelsession.ClearedValue && (!plain || len(v) > c.spec.MaxLen) {
				switch nv, err := otelsession.ValidateValue(c.spec, v); {
				case err == nil:
				case errors.Is(err, ErrInvalidValue):
					errs = append(errs, err)
				default:
					in.display = append(in.display, displayFix{c.spec.Key, nv})
				}
			}
			in.vals[signedPos[i]].v, in.vals[signedPos[i]].ok = v, true
		}
	}
	switch key, v, _ := in.member(b, &asyncClass, seen, written, known < n); {
	case key == "":
		if seen&asyncBit != 0 {
			errs = append(errs, fmt.Errorf("%s: %w", otelsession.AsyncDeliveryKey, ErrMalformedMember))
		}
	case v != "0":
		known++
		in.present = true
		errs = append(errs, fmt.Errorf("%s: %w", otelsession.AsyncDeliveryKey, ErrInvalidValue))
	default:
		known++
		in.present = true
		in.vals[asyncPos].v, in.vals[asyncPos].ok = v, true
	}
	switch key, v, _ := in.member(b, &sigClass, seen, written, known < n); {
	case key == "":
		if seen&sigBit != 0 {
			errs = append(errs, fmt.Errorf("%s: %w", otelsession.SignatureKey, ErrMalformedMember))
		}
	default:
		known++
		in.present, in.hasSig, in.sig = true, true, v
	}
	if noRaw && n > known {
		for _, m := range b.Members() {
			if k := m.Key(); otelsession.OwnedKey(k) {
				if _, ok := otelsession.SpecOf(k); !ok {
					errs = append(errs, fmt.Errorf("%q: %w", k, ErrUnknownSessionKey))
				}
			}
		}
	}
	return joinListed(errs)
}

// member returns the member of b for row c: read from the line when
// written holds a plain value for it (plain), else looked up when lookup
// (some member of b is not accounted for yet). key is "" for none.
func (in *inboundSession) member(b baggage.Baggage, c *keyClass, seen keySet, written *writtenMembers, lookup bool) (key, value string, plain bool) {
	if written != nil {
		if seen&c.bit == 0 {
			return "", "", false
		}
		if v, ok := plainValue(written.rest[c.idx]); ok {
			return c.spec.Key, v, true
		}
	}
	if !lookup {
		return "", "", false
	}
	m := b.Member(c.spec.Key)
	return m.Key(), m.Value(), false
}

// asyncClass and sigClass are the raw scan's rows of the async-delivery key
// and the signature.
var asyncClass, sigClass = *classify(otelsession.AsyncDeliveryKey), *classify(otelsession.SignatureKey)

// keyOf returns the session key of slot idx.
func (w *writtenMembers) keyOf(idx uint8) string {
	switch idx {
	case asyncClass.idx:
		return otelsession.AsyncDeliveryKey
	case sigIdx:
		return otelsession.SignatureKey
	}
	return fieldKeys[idx-1].spec.Key
}

// fields is the session schema, read once.
var fields = otelsession.Fields()

// resetAndExtract Resets ctx's session, when it holds one, and extracts
// carrier into it with prop: the whole inbound step for a carrier that
// holds no session (stockprop.NoSession), and the first for any other.
func resetAndExtract(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier) context.Context {
	if holdsSession(ctx) {
		ctx = otelsession.Reset(ctx)
	}
	return prop.Extract(ctx, carrier)
}

func init() {
	stockprop.Extract = func(policy any, ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, line string) context.Context {
		p, _ := policy.(*Inbound)
		return p.extractQuiet(ctx, prop, carrier, line)
	}
}

// holdsSession reports whether ctx holds any state otelsession.Reset would
// remove: session members in its baggage, or any state beside the baggage
// (one context look-up, however many local fields the table has). Most
// inbound requests start from a context with none, and Reset costs more
// than the policy's own checks (TestInboundNeverInheritsTheServerContextSession
// covers every kind of state).
func holdsSession(ctx context.Context) bool {
	return hasSession(baggage.FromContext(ctx)) || sessionstate.HasLocal(ctx)
}

// HasSession reports whether b holds any member of the session: a field,
// the async-delivery capability or the signature.
func HasSession(b baggage.Baggage) bool { return hasSession(b) }

func hasSession(b baggage.Baggage) bool {
	switch n := b.Len(); {
	case n == 0:
		return false
	case n <= smallBaggage:
		return hasSessionMember(b)
	}
	return hasSessionKey(b)
}

// smallBaggage is the most members hasSession reads whole rather than look
// up every session key: for a baggage without a session (an application's
// own few members, the common case for HasSession to answer false), reading
// the members costs one allocation where the look-ups cost 27 map reads
// (25 fields, the async-delivery capability and the signature;
// BenchmarkHasSession).
const smallBaggage = 4

// hasSessionMember is hasSession by reading every member of b.
func hasSessionMember(b baggage.Baggage) bool {
	for _, m := range b.Members() {
		if classify(m.Key()) != nil {
			return true
		}
	}
	return false
}

// hasSessionKey is hasSession by looking every session key up in b.
func hasSessionKey(b baggage.Baggage) bool {
	for _, f := range fields {
		if b.Member(f.Key()).Key() != "" {
			return true
		}
	}
	return b.Member(otelsession.AsyncDeliveryKey).Key() != "" || b.Member(otelsession.SignatureKey).Key() != ""
}
