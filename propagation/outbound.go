package propagation

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/internal/sessionmetrics"
	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/internal/stockprop"
)

// Transport names, for [Peer.Transport] and [Dest.Transport].
const (
	TransportHTTP  = "http"
	TransportGRPC  = "grpc"
	TransportNATS  = "nats"
	TransportKafka = "kafka"
	TransportAMQP  = "amqp"
	// TransportEnv is a child process's environment.
	TransportEnv = "env"
)

// Dest describes where a carrier is going, for an [AllowFunc]: the mirror of
// [Peer].
type Dest struct {
	// Transport names the boundary: [TransportHTTP], [TransportNATS], …
	Transport string
	// Name identifies the destination within the transport: the URL's host
	// for HTTP, the subject, topic or exchange for a queue, the program for
	// a child process.
	Name string
	// URL is the request's URL for HTTP, grpc://<authority>/<method> for
	// gRPC (nil otherwise). It is shared, the request's own for HTTP, one per
	// method and connection for gRPC: an AllowFunc reads it and must not
	// modify it.
	URL *url.URL
	// MessageID is what a signature on this carrier is bound to, the mirror
	// of [Peer.MessageID]: on the queues (NATS, Kafka, AMQP), the
	// transport's name, the destination and the message's id when it has
	// one, never ""; "" where nothing binds a signature. A signature is
	// bound to it, so it cannot be moved onto another message, destination
	// or transport. The queue publishers build it only when the policy has
	// a signer ("" otherwise), so an AllowFunc should not rely on it. See
	// [Signer.SignFor].
	MessageID string
}

// AllowFunc decides whether a destination may receive the session. It is the
// sender's decision, made for every carrier.
type AllowFunc func(ctx context.Context, d Dest) bool

// AllowNone lets no session out.
func AllowNone(context.Context, Dest) bool { return false }

// AllowAll lets the session go everywhere. Use it only where every
// destination is inside the trust domain (a NATS account only this system
// uses).
func AllowAll(context.Context, Dest) bool { return true }

// AllowChildProcesses lets the session into the environment of the child
// processes this process starts ([TransportEnv]) and nowhere else: a child
// runs on the same host, under the same user, inside the same trust domain.
// It is the default of every transport ([NewOutbound] with a nil AllowFunc).
func AllowChildProcesses(_ context.Context, d Dest) bool { return d.Transport == TransportEnv }

// AllowURLs lets the session go to the HTTP (and gRPC, by its URL)
// destinations e lists; see [Egress.Allows].
func AllowURLs(e Egress) AllowFunc {
	return func(_ context.Context, d Dest) bool { return e.Allows(d.URL) }
}

// AllowNames lets the session go to the destinations of one transport whose
// name matches one of patterns, compared token by token as NATS subjects are
// ("." separates tokens, "*" matches one token, a final ">" one or more):
// AllowNames(TransportNATS, "gw.>") allows gw.jobs.telegram but not
// partner.feed. A pattern without wildcards matches the name exactly (a
// Kafka topic, an AMQP exchange).
func AllowNames(transport string, patterns ...string) AllowFunc {
	ps := append([]string(nil), patterns...)
	return func(_ context.Context, d Dest) bool {
		if d.Transport != transport {
			return false
		}
		for _, p := range ps {
			if matchName(p, d.Name) {
				return true
			}
		}
		return false
	}
}

// AnyOf allows what any of fns allows.
func AnyOf(fns ...AllowFunc) AllowFunc {
	return func(ctx context.Context, d Dest) bool {
		for _, f := range fns {
			if f != nil && f(ctx, d) {
				return true
			}
		}
		return false
	}
}

func matchName(pattern, name string) bool {
	if pattern == "" || name == "" {
		return false
	}
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		nt, nrest, nmore := strings.Cut(name, ".")
		switch {
		case pt == ">" && !pmore:
			return nt != ""
		case pt != "*" && pt != nt, nt == "":
			return false
		case !pmore || !nmore:
			return pmore == nmore
		}
		pattern, name = prest, nrest
	}
}

// OutboundCounts is a snapshot of what an [Outbound] policy has done.
type OutboundCounts struct {
	Sent     uint64 // carriers that left with the context's session
	Signed   uint64 // of those, signed
	Withheld uint64 // carriers that left without it: the destination is not allowed
	// Invalid counts carriers whose session was withheld because a value in
	// the context's baggage is one no edge accepts (written by code other
	// than otelsession's writers); they are counted in Withheld too.
	Invalid uint64
	// Prewritten counts session members removed from what a carrier already
	// held before injection (a baggage header the application wrote itself,
	// in any spelling of its name).
	Prewritten uint64
}

// Outbound is the policy for sessions leaving the process: the mirror of
// [Inbound]. It says where the session may go (its [AllowFunc]) and signs it
// ([WithSigner]), and every transport sends through its one [Outbound.Inject].
// Build one with [NewOutbound]; it is safe for concurrent use. A nil
// *Outbound is the default policy, [AllowChildProcesses] without a signer.
type Outbound struct {
	allow  AllowFunc
	signer *Signer
	n      struct{ sent, signed, withheld, invalid, prewritten atomic.Uint64 }
}

// OutboundOption configures an [Outbound] policy.
type OutboundOption func(*Outbound)

// WithSigner makes the policy sign the session of every carrier it lets the
// session into, bound to [Dest.MessageID] when the transport gives one (see
// [Signer.SignFor]). A nil s signs nothing.
func WithSigner(s *Signer) OutboundOption {
	return func(o *Outbound) { o.signer = s }
}

// NewOutbound returns a policy that lets the session go where allow says. A
// nil allow is the default of every transport, [AllowChildProcesses]: no
// session reaches the network until the program names where it may go
// (AllowURLs, AllowNames, AllowAll).
func NewOutbound(allow AllowFunc, opts ...OutboundOption) *Outbound {
	if allow == nil {
		allow = AllowChildProcesses
	}
	o := &Outbound{allow: allow}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	return o
}

// Allows reports whether d may receive the session.
func (o *Outbound) Allows(ctx context.Context, d Dest) bool {
	if o == nil {
		return AllowChildProcesses(ctx, d)
	}
	return o.allow(ctx, d)
}

// Signer returns the policy's signer, nil when it signs nothing.
func (o *Outbound) Signer() *Signer {
	if o == nil {
		return nil
	}
	return o.signer
}

// Counts returns what the policy has done so far; all zero for a nil policy.
func (o *Outbound) Counts() OutboundCounts {
	if o == nil {
		return OutboundCounts{}
	}
	return OutboundCounts{
		Sent: o.n.sent.Load(), Signed: o.n.signed.Load(), Withheld: o.n.withheld.Load(),
		Invalid: o.n.invalid.Load(), Prewritten: o.n.prewritten.Load(),
	}
}

// Inject is the whole outbound path, the one every transport calls: it
// writes ctx's trace context and baggage into carrier with prop
// (otel.GetTextMapPropagator() when nil), with the session only when the
// policy allows d.
//
//  1. Whatever carrier already holds under any spelling of "baggage"
//     (baggage, Baggage, BAGGAGE, several entries) loses its session
//     members, whoever wrote them; the other members are kept, in one
//     entry, which the propagator then replaces when ctx has baggage of its
//     own (as every OTel baggage propagator does). A session leaves only as
//     this policy writes it.
//  2. When d is allowed, the context's session is validated with the one
//     value rule (otelsession.ValidateValue) and signed with the policy's
//     signer, bound to d.MessageID. A session with a value no edge would
//     accept is withheld (counted as Invalid) rather than sent to be
//     refused one hop later.
//  3. When d is not allowed, the session is withheld: no session member and
//     no signature reach the carrier. Trace context and the application's
//     own baggage members are sent either way.
//
// Members in the session namespace that the wire-key table does not know in
// their canonical spelling (session%2Echat_id, SESSION.chat_id,
// session.future) are never sent. The error, when not nil, names the
// destination and wraps the reason (a signature that does not fit the W3C
// limits: the carrier then has the session unsigned; an invalid value: the
// carrier has no session); carrier has been written in every case.
func (o *Outbound) Inject(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, d Dest) error {
	_, err := o.inject(ctx, prop, carrier, d, false)
	return err
}

// InjectContext is [Outbound.Inject], and also returns the context whose
// trace context and baggage it wrote into carrier: ctx itself, ctx without
// its session when the session was withheld, or ctx with the session signed.
// A transport that hands a context on beside the carrier (an HTTP request's
// copy, for a RoundTripper below it that injects again) uses this one rather
// than deciding and stripping a second time. The signed context's baggage is
// built when something first reads it: a RoundTripper that never looks costs
// no copy of it.
func (o *Outbound) InjectContext(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, d Dest) (context.Context, error) {
	return o.inject(ctx, prop, carrier, d, true)
}

// inject is InjectContext; wantCtx false says the caller drops the context
// it returns, which then need not carry the signature.
func (o *Outbound) inject(ctx context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier, d Dest, wantCtx bool) (context.Context, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if prop == nil {
		prop = otel.GetTextMapPropagator()
	}
	if carrier == nil {
		return ctx, fmt.Errorf("send session to %s %q: nil carrier", d.Transport, d.Name)
	}
	o.stripPrewritten(carrier, d)
	b := baggage.FromContext(ctx)
	if b.Len() == 0 {
		// No baggage at all (most background work): nothing to decide,
		// strip from the context or sign.
		prop.Inject(ctx, carrier)
		return ctx, nil
	}
	// A baggage an otelsession writer built and validated, untouched since,
	// needs no second reading: it has no stray key, no refused value and no
	// signature.
	checkedPresent, checked := sessionstate.Checked(ctx, b)
	if !checked {
		checkedPresent, checked = acceptedSession(ctx, b)
	}
	had := checkedPresent
	if !checked {
		had = hasSession(b)
	}
	var errs []error
	out, sent, signed, invalid := ctx, false, false, false
	var appendSigner *Signer // signs after the injection, into the carrier
	switch {
	case !had && checked:
		// A baggage Bind built without a session: there is nothing to
		// decide, strip or sign.
	case o.Allows(ctx, d):
		present, strays, err := checkedPresent, false, error(nil)
		if !checked {
			present, strays, err = outboundSession(b)
		}
		switch {
		case err != nil:
			errs = append(errs, err)
			out, invalid = WithoutSession(ctx), true
		case strays && !present:
			out = WithoutSession(ctx)
		case present:
			if strays {
				out = withoutStrays(ctx)
			}
			sent = true
			if s := o.Signer(); s != nil && appendsSignature(prop, carrier, out, checked) {
				appendSigner = s
			} else if s != nil {
				var serr error
				if out, serr = s.SignFor(out, d.MessageID); serr != nil {
					errs = append(errs, serr)
				} else {
					signed = true
				}
			}
		}
	default:
		out = WithoutSession(ctx) // strays too, when there is no session
	}
	injectOut(out, prop, carrier)
	if appendSigner != nil {
		sig, resigned, err := appendSigner.appendTo(out, carrier, d.MessageID)
		switch {
		case err != nil:
			errs = append(errs, err) // sent unsigned, as out is
		case resigned != nil:
			out, signed = resigned, true
		default:
			signed = true
			if wantCtx {
				out = withSignature(out, sig)
			}
		}
	}
	if had {
		o.count(sent, signed, invalid)
		outcome := "withheld"
		if sent {
			outcome = "sent"
		}
		sessionmetrics.Outbound(d.Transport, outcome, signed)
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("send session to %s %q: %w", d.Transport, d.Name, err)
	}
	return out, nil
}

// stripPrewritten removes from carrier the session members something wrote
// there before the policy ran, and counts them.
func (o *Outbound) stripPrewritten(carrier otelprop.TextMapCarrier, d Dest) {
	if n := stripCarrier(carrier); n > 0 {
		sessionmetrics.Prewritten(d.Transport, n)
		if o != nil {
			o.n.prewritten.Add(uint64(n))
		}
	}
}

func (o *Outbound) count(sent, signed, invalid bool) {
	switch {
	case o == nil:
	case sent:
		o.n.sent.Add(1)
		if signed {
			o.n.signed.Add(1)
		}
	default:
		o.n.withheld.Add(1)
		if invalid {
			o.n.invalid.Add(1)
		}
	}
}

// outboundSession reads the session of b as Inject sends it: whether it has
// any member, whether b also holds members in the session namespace that
// the table does not know (strays), and the first value no edge would
// accept.
func outboundSession(b baggage.Baggage) (present, strays bool, err error) {
	if b.Len() == 0 {
		return false, false, nil
	}
	known, n := 0, b.Len()
	for i := range outSpecs {
		if known == n {
			// Every member is accounted for: no later row can be present.
			break
		}
		s := &outSpecs[i]
		m := b.Member(s.Key)
		if m.Key() == "" {
			continue
		}
		known++
		present = true
		v := m.Value()
		if v == "" || v == otelsession.ClearedValue || s.Key == otelsession.SignatureKey {
			continue
		}
		if s.Key == otelsession.AsyncDeliveryKey {
			if v != "0" && err == nil {
				err = fmt.Errorf("%s: %w", s.Key, ErrInvalidValue)
			}
			continue
		}
		// A display value the table would cut or drop is cut or dropped by
		// the next edge, which keeps the session; only a refusal withholds.
		if _, verr := otelsession.ValidateValue(*s, v); errors.Is(verr, ErrInvalidValue) && err == nil {
			err = verr
		}
	}
	if n > known {
		for _, m := range b.Members() {
			if k := m.Key(); otelsession.OwnedKey(k) {
				if _, ok := otelsession.SpecOf(k); !ok {
					strays = true
					break
				}
			}
		}
	}
	return present, strays, err
}

// acceptedSession reports whether b, ctx's baggage, is one an inbound
// policy accepted, untouched since (its record is in ctx: see
// inboundSession.withRecord and the cache's entries), with no signature
// member, and whether it holds a session member. Such a baggage passed the
// inbound check, which refuses what outboundSession withholds (a refused
// value, a local field, an async capability but "0", a key of the
// namespace the table does not know) and cuts a display value the table
// would cut: a worker that sends on the session it was handed needs no
// second reading of it (FuzzExtract holds the two ways to each other).
// A signature kept in it (one accepted where nothing binds it: an HTTP
// request, a child process's environment) leaves it to outboundSession, as
// a writer's baggage never holds one.
func acceptedSession(ctx context.Context, b baggage.Baggage) (present, ok bool) {
	if !sessionstate.MayHaveRecord(b) {
		return false, false
	}
	r := sessionstate.RecordIn(ctx, b)
	if r == nil || b.Member(otelsession.SignatureKey).Key() != "" {
		return false, false
	}
	for i := range otelsession.NumFields {
		if _, st := r.Field(i); st != sessionstate.Unset {
			return true, true
		}
	}
	return b.Member(otelsession.AsyncDeliveryKey).Key() != "", true
}

// outSpecs are the rows of the keys that may travel as baggage: the remote
// fields, the async-delivery capability and the signature.
var outSpecs = func() []otelsession.Spec {
	var ss []otelsession.Spec
	for _, s := range otelsession.Specs() {
		if s.Baggage() {
			ss = append(ss, s)
		}
	}
	return ss
}()

// withoutStrays removes from ctx's baggage every member in the session
// namespace that the table does not know in its canonical spelling.
func withoutStrays(ctx context.Context) context.Context {
	b := baggage.FromContext(ctx)
	for _, m := range b.Members() {
		if k := m.Key(); otelsession.OwnedKey(k) {
			if _, ok := otelsession.SpecOf(k); !ok {
				b = b.DeleteMember(k)
			}
		}
	}
	return baggage.ContextWithBaggage(ctx, b)
}

// injectOut is prop.Inject(out, carrier). Where prop writes baggage only
// through OpenTelemetry's W3C propagator and out's baggage is one an
// otelsession writer built (the common case: a handler's context from
// Bind, or Reset's, the application's members it kept beside the session
// included), the line is written from the record of its values and the
// keys the writer noted (sessionstate.WireLine): the members
// Baggage.String would write, in another order, in one allocation where it
// makes one per member, for about a third of its CPU time for a full
// session (otelsession's BenchmarkWireLine).
func injectOut(out context.Context, prop otelprop.TextMapPropagator, carrier otelprop.TextMapCarrier) {
	if w3c, known := stockprop.Baggage(prop); w3c && known {
		if line, ok := sessionstate.WireLine(out, baggage.FromContext(out)); ok {
			stockprop.InjectLine(out, prop, carrier, line)
			return
		}
	}
	prop.Inject(out, carrier)
}
