package grpcsession

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/carrierwrap"
	"github.com/sessionwire/sessionwire/propagation/internal/mention"
	"github.com/sessionwire/sessionwire/propagation/internal/sessionevent"
	"github.com/sessionwire/sessionwire/propagation/internal/stockprop"
)

const (
	baggageKey    = "baggage"
	baggageBinKey = "baggage-bin"
)

// ServerOptions returns the unary and stream server interceptors configured
// by opts, for grpc.NewServer. They may be given beside
// grpc.StatsHandler(otelgrpc.NewServerHandler()), before or after it: gRPC
// runs every stats handler before any interceptor, so the policy always
// decides last, on the context the span was started in.
func ServerOptions(opts ...Option) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(opts...)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(opts...)),
	}
}

// UnaryServerInterceptor applies the inbound policy to every unary call:
// the handler's context carries the session the policy accepted and no
// other. See [StreamServerInterceptor] for streams and the package
// documentation for what is judged.
func UnaryServerInterceptor(opts ...Option) grpc.UnaryServerInterceptor {
	return newConfig(opts).unaryServer()
}

func (c *config) unaryServer() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := c.serverContext(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor applies the inbound policy once per stream, when
// it opens: the stream's Context, seen by the handler and every message it
// handles for the life of the stream, carries the session of the call.
func StreamServerInterceptor(opts ...Option) grpc.StreamServerInterceptor {
	return newConfig(opts).streamServer()
}

func (c *config) streamServer() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := c.serverContext(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
	}
}

// serverStream is a ServerStream whose Context carries the call's session.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

// errUnauthenticated is what a service that needs a session answers without
// one. It says what is missing, never why the peer's was refused: that is
// for the server's logs (WithOnError, the policy's Counts).
var errUnauthenticated = status.Error(codes.Unauthenticated,
	"this service needs a conversation session from a trusted peer or signed with a trusted key; the call had none that was accepted")

// serverContext is the whole server-side step for one call.
func (c *config) serverContext(ctx context.Context, method string) (context.Context, error) {
	switch v := ctx.Value(verdictKey{c}).(type) {
	case *verdict:
		return c.actOn(ctx, v, method)
	case *sessionstate.RecordContext:
		// The Edge's propagator accepted the session whole (edge.go).
		return c.actOn(ctx, &verdict{c: c, bag: v.R.B, present: true}, method)
	}
	// The call's own map, read in place, when every key in it is lower-case
	// ASCII, as on the wire (HTTP/2 refuses any other): it then holds just
	// what metadata.FromIncomingContext's copy would, one spelling of each
	// key, and the handler reads the very lines judged. It is only read;
	// the one path that writes (a refused session's line taken out, below)
	// copies it first. Any other map (built by hand) is copied with
	// lower-cased keys, as the handler's own reads would copy it.
	md, inPlace := incomingMD(ctx)
	var carrier *callMD
	if inPlace {
		if carrier = newCallMD(md); !carrier.plain {
			inPlace = false
		}
	}
	if !inPlace {
		md, _ = metadata.FromIncomingContext(ctx) // a copy with lower-case keys
		if md == nil {
			md = metadata.MD{}
		}
		carrier = newCallMD(md)
	}
	var binErr error
	if len(carrier.Values(baggageBinKey)) > 0 {
		// No W3C format is binary. A peer that sends one is either confused
		// or hoping that something behind the policy decodes it; its baggage
		// is not read at all.
		binErr = fmt.Errorf("extract session from grpc: %s entry: %w", baggageBinKey, propagation.ErrMalformedMember)
	}
	var authority string
	if a := md[":authority"]; len(a) > 0 {
		authority = a[0]
	}
	lines := carrier.Values(baggageKey)
	extractFrom := otelprop.TextMapCarrier(carrier)
	switch {
	case binErr != nil:
		extractFrom = carrierwrap.HideBaggage{C: carrier}
	case len(lines) == 1 && carrier.SingleValued():
		extractFrom = oneBaggageLine{carrier}
	}
	prop := c.propagator()
	// A context that holds a span context already got it from a stats
	// handler that ran before this interceptor (otelgrpc's: the server span
	// it started from the call's trace context, or, without a tracer
	// provider, that trace context itself). When prop is known to carry
	// nothing but the W3C trace context and baggage, the policy then
	// extracts the baggage alone: the trace context is the stats handler's,
	// and extracting it again would only make the server span's remote
	// parent current, to be put back below.
	span := trace.SpanFromContext(ctx)
	sc := span.SpanContext()
	baggageOnly := false
	if w3c, known := stockprop.Baggage(prop); sc.IsValid() && w3c && known {
		prop, baggageOnly = otelprop.Baggage{}, true
	}
	base := ctx
	if len(lines) > 0 && baggage.FromContext(ctx).Len() > 0 {
		// otelgrpc's stats handler already extracted this baggage into ctx;
		// the policy extracts it again and would otherwise first Reset the
		// session it finds there, which costs more than the policy itself.
		base = baggage.ContextWithoutBaggage(ctx)
	}
	var out context.Context
	var err error
	if binErr == nil && len(lines) == 1 && stockprop.NoSession(prop, extractFrom, lines[0]) {
		// As in the Edge's propagator: the policy's step for a line that
		// names no session, which consults no peer.
		out = stockprop.Extract(c.inbound, base, prop, extractFrom, lines[0])
	} else {
		out, err = c.inbound.Extract(base, prop, extractFrom, peerOf(ctx, authority))
	}
	if binErr != nil {
		err = binErr
	}
	// When prop (an unknown propagator) extracted the trace context again,
	// it made the server span's remote parent current. Put the server span
	// back so the handler's spans stay its children.
	if !baggageOnly && sc.IsValid() && !sc.IsRemote() {
		out = trace.ContextWithSpan(out, span)
	}
	hasSession := propagation.HasSession(baggage.FromContext(out))
	// The server span (otelgrpc's, when it runs) says why a session was
	// refused or stripped.
	offered := !hasSession && mentionsSession(lines)
	if span := trace.SpanFromContext(out); err != nil {
		sessionevent.Refused(span, err)
	} else if offered {
		sessionevent.StrippedIfOffered(span, baggage.FromContext(out), lines, peerOf(ctx, authority))
	}
	if !hasSession && binErr != nil || offered {
		// Code behind the interceptor that reads the incoming metadata again
		// (a proxy forwarding it, a second extraction) must not revive the
		// refused session: hand it metadata re-encoded from the context.
		if inPlace {
			md = md.Copy() // the call's own map is gRPC's, never written
			carrier = newCallMD(md)
		}
		carrier.Delete(baggageKey)
		carrier.Delete(baggageBinKey)
		otelprop.Baggage{}.Inject(out, carrier)
		out = metadata.NewIncomingContext(out, md)
	} else if !inPlace && len(md[baggageKey]) > 0 {
		// md is metadata.FromIncomingContext's lower-cased copy. When the
		// context's map holds "Baggage" beside "baggage" (metadata built by
		// hand: on the wire keys are lower-case), that copy keeps one of the
		// lists, a different one from call to call, and the handler's own
		// read may keep the other, never judged. The handler reads the lines
		// that were judged.
		out = metadata.NewIncomingContext(out, md)
	}
	return c.finish(out, method, err, hasSession)
}

// finish runs the options that act on the verdict.
func (c *config) finish(out context.Context, method string, err error, hasSession bool) (context.Context, error) {
	if err != nil && c.onError != nil {
		c.onError(out, method, err)
	}
	if c.unauthenticated && !hasSession {
		return nil, errUnauthenticated
	}
	if hasSession && c.onAccept != nil {
		c.onAccept(out, method)
	}
	return out, nil
}

// actOn is the server step for a call the Edge's propagator already judged
// in otelgrpc's handler: the verdict is acted on, nothing is extracted again.
func (c *config) actOn(ctx context.Context, v *verdict, method string) (context.Context, error) {
	out := ctx
	if cur := baggage.FromContext(ctx); (v.bag.Len() > 0 || cur.Len() > 0) && !sessionstate.SameBaggage(cur, v.bag) {
		// The handler's baggage is the one judged, whatever a stats handler
		// registered after otelgrpc's may have put in the context since.
		out = baggage.ContextWithBaggage(ctx, v.bag)
	}
	hasSession := v.present
	offered := !hasSession && !v.quiet && mentionsSession(v.lines)
	if v.err != nil {
		sessionevent.Refused(trace.SpanFromContext(out), v.err)
	} else if offered {
		// The peer is described again for the event, on this rare path,
		// rather than kept in every call's verdict.
		sessionevent.StrippedIfOffered(trace.SpanFromContext(out), v.bag, v.lines, peerOf(out, authorityOf(out)))
	}
	switch {
	case offered:
		// As in serverContext: nothing behind the interceptor revives a
		// refused session from the metadata.
		md, _ := metadata.FromIncomingContext(out)
		if md == nil {
			md = metadata.MD{}
		}
		carrier := newCallMD(md)
		carrier.Delete(baggageKey)
		otelprop.Baggage{}.Inject(out, carrier)
		out = metadata.NewIncomingContext(out, md)
	case !hasSession && len(v.lines) > 0 && !v.judgedOnly(out):
		// Hand-built metadata can spell the key twice ("Baggage" beside
		// "baggage"); the propagator judged one list, and the handler's own
		// read may keep the other, never judged, which may hold a session.
		// Each of gRPC's reads keeps either list, so none of them can tell;
		// judgedOnly reads the map itself, and unless it finds the judged
		// lines alone, a call without a session hands the handler a copy
		// that holds them. (On the wire keys are lower-case: HTTP/2 refuses
		// any other, so a call off the wire is not copied. A call with an
		// accepted session is not copied for it: whatever the handler
		// reads, its context holds the judged session, and calls out
		// through this package's client interceptors or Edge drop session
		// members from forwarded metadata.)
		if md, _ := metadata.FromIncomingContext(out); md != nil {
			md[baggageKey] = slices.Clone(v.lines) // v.lines may be the call's own map's
			out = metadata.NewIncomingContext(out, md)
		}
	}
	return c.finish(out, method, v.err, hasSession)
}

// oneBaggageLine is a call's metadata without its Values method, for a call
// whose every key has one value (callMD.SingleValued, the rule
// Inbound.Extract applies to any carrier that can tell): the W3C propagator
// then parses the one baggage line once, where through Values it parses it
// and builds the baggage again from its members, which doubles the cost of
// the most common call. It is a type of its own, not Inbound.Extract's
// generic wrapper, because a pointer fits in an interface without
// allocating.
type oneBaggageLine struct{ c *callMD }

func (o oneBaggageLine) Get(key string) string { return o.c.Get(key) }
func (o oneBaggageLine) Set(key, value string) { o.c.Set(key, value) }
func (o oneBaggageLine) Keys() []string        { return o.c.Keys() }

// authorityOf returns the first :authority of ctx's incoming metadata,
// which the client addressed.
func authorityOf(ctx context.Context) string {
	if a := metadata.ValueFromIncomingContext(ctx, ":authority"); len(a) > 0 {
		return a[0]
	}
	return ""
}

// peerOf describes the caller: the address of the connection, and as its
// name the verified client certificate's first URI SAN or DNS SAN when the
// connection is TLS with a verified client certificate, else the
// :authority the client addressed.
func peerOf(ctx context.Context, authority string) propagation.Peer {
	p := propagation.Peer{Transport: propagation.TransportGRPC}
	if pr, ok := peer.FromContext(ctx); ok {
		p.Addr = addrOf(pr.Addr)
		if cert := verifiedCert(pr.AuthInfo); cert != nil {
			p.Name = certName(cert)
		}
	}
	if p.Name == "" {
		p.Name = authority
	}
	return p
}

func addrOf(a net.Addr) netip.Addr {
	switch t := a.(type) {
	case nil:
		return netip.Addr{}
	case *net.TCPAddr:
		return t.AddrPort().Addr()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr()
	}
	return netip.Addr{}
}

// verifiedCert returns the client's leaf certificate when the TLS handshake
// verified its chain, nil otherwise (no TLS, no client certificate, or one
// the server asked for but did not verify).
func verifiedCert(ai credentials.AuthInfo) *x509.Certificate {
	var info credentials.TLSInfo
	switch t := ai.(type) {
	case credentials.TLSInfo:
		info = t
	case *credentials.TLSInfo:
		if t == nil {
			return nil
		}
		info = *t
	default:
		return nil
	}
	if len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

func certName(cert *x509.Certificate) string {
	for _, u := range cert.URIs {
		if u != nil {
			return u.String()
		}
	}
	if len(cert.DNSNames) > 0 {
		return cert.DNSNames[0]
	}
	return ""
}

// TrustSANs trusts callers whose verified TLS client certificate names one
// of sans as a URI SAN ("spiffe://prod/ns/gw/sa/gateway", compared exactly)
// or a DNS SAN ("gateway.internal", compared ignoring case): trust by
// workload, not by network. It reads the certificate from the call's
// context, never from [propagation.Peer.Name], which over a connection
// without a verified certificate is the :authority the client chose. A
// caller without a verified certificate is not trusted. Combine it with
// address rules as a TrustFunc of your own when both are needed.
func TrustSANs(sans ...string) propagation.TrustFunc {
	want := append([]string(nil), sans...)
	return func(ctx context.Context, _ propagation.Peer) bool {
		pr, ok := peer.FromContext(ctx)
		if !ok {
			return false
		}
		cert := verifiedCert(pr.AuthInfo)
		if cert == nil {
			return false
		}
		for _, w := range want {
			for _, u := range cert.URIs {
				if u != nil && u.String() == w {
					return true
				}
			}
			for _, d := range cert.DNSNames {
				if strings.EqualFold(d, w) {
					return true
				}
			}
		}
		return false
	}
}

// mentionsSession reports whether any of lines may hold a session member
// (mention.Mentioned).
func mentionsSession(lines []string) bool {
	for _, v := range lines {
		if mention.Mentioned(v) {
			return true
		}
	}
	return false
}
