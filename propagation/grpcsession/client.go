package grpcsession

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// DialOptions returns the unary and stream client interceptors configured
// by opts, for grpc.NewClient. They may be given beside
// grpc.WithStatsHandler(otelgrpc.NewClientHandler()), before or after it.
// Give them last among interceptors: an interceptor that runs after them
// and writes baggage into the outgoing metadata is not filtered.
func DialOptions(opts ...Option) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(UnaryClientInterceptor(opts...)),
		grpc.WithChainStreamInterceptor(StreamClientInterceptor(opts...)),
	}
}

// UnaryClientInterceptor applies the outbound policy to every unary call;
// see [StreamClientInterceptor].
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	c := newConfig(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		return invoker(c.clientContext(ctx, cc, method), method, req, reply, cc, callOpts...)
	}
}

// StreamClientInterceptor applies the outbound policy once per stream, when
// it opens: a stream's metadata is sent once, with its first message.
//
// The call's outgoing metadata (metadata.NewOutgoingContext and
// metadata.AppendToOutgoingContext alike) loses the session members of its
// baggage entries, in every spelling of the key, and any baggage-bin entry;
// then the trace context and baggage of the call's context are injected,
// the session only when the policy allows the destination, signed when it
// signs. The context handed on carries the session exactly as it was
// written (signed, or without it), so a stats handler that injects again
// from the context (otelgrpc's) writes the same.
func StreamClientInterceptor(opts ...Option) grpc.StreamClientInterceptor {
	c := newConfig(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(c.clientContext(ctx, cc, method), desc, cc, method, callOpts...)
	}
}

// clientContext is the whole client-side step for one call.
func (c *config) clientContext(ctx context.Context, cc *grpc.ClientConn, method string) context.Context {
	d := c.destOf(cc, method)
	md, _ := metadata.FromOutgoingContext(ctx) // a copy with lower-case keys, appended pairs merged
	if md == nil {
		md = metadata.MD{}
	}
	carrier := newCallMD(md)
	carrier.Delete(baggageBinKey)
	if err := c.outbound.Inject(ctx, c.propagator(), carrier, d); err != nil {
		// The call still goes, without the session or unsigned, as err says.
		if c.onError != nil {
			c.onError(ctx, method, err)
		} else {
			otel.Handle(fmt.Errorf("grpcsession: outgoing call %s: %w", method, err))
		}
	}
	if baggage.FromContext(ctx).Len() > 0 {
		// Also without a session: members in the session namespace that are
		// not the table's (session.future) must not reach otelgrpc either.
		ctx = c.sendContext(ctx, d, carrier.Values(baggageKey))
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// sendContext returns the context to hand on: its session is the one the
// policy wrote into lines, so that a stats handler that injects the
// context's baggage again (otelgrpc's) writes the same. The common cases
// cost no parsing: a refused destination gets the context without its
// session; an allowed one, when the policy wrote as many members as the
// context holds, the context itself (nothing was withheld), plus the
// signature it added when it signs.
func (c *config) sendContext(ctx context.Context, d propagation.Dest, lines []string) context.Context {
	if !c.outbound.Allows(ctx, d) {
		return propagation.WithoutSession(ctx)
	}
	if len(lines) != 1 {
		return withSessionAsWritten(ctx, lines)
	}
	b := baggage.FromContext(ctx)
	// Values are percent-encoded on the wire, so commas separate members.
	written := strings.Count(lines[0], ",") + 1
	switch signs := c.outbound.Signer() != nil; {
	case !signs && written == b.Len():
		return ctx
	case signs && (written == b.Len() || written == b.Len()+1):
		if sig, ok := memberOf(lines[0], sigPrefix); ok {
			if m, err := baggage.NewMemberRaw(otelsession.SignatureKey, sig); err == nil {
				if nb, err := b.SetMember(m); err == nil && nb.Len() == written {
					return baggage.ContextWithBaggage(ctx, nb)
				}
			}
		}
	}
	return withSessionAsWritten(ctx, lines)
}

var sigPrefix = otelsession.SignatureKey + "="

// memberOf returns the raw value of the member of line that starts with
// prefix ("key=").
func memberOf(line, prefix string) (string, bool) {
	for rest := line; rest != ""; {
		var m string
		m, rest, _ = strings.Cut(rest, ",")
		if v, ok := strings.CutPrefix(m, prefix); ok {
			return v, true
		}
	}
	return "", false
}

// withSessionAsWritten returns ctx with the baggage the policy wrote into
// lines: without the session when it withheld it, with the signed session
// when it signed it. When nothing was written (a propagator without W3C
// baggage), the session is removed: it leaves only as the policy writes it.
func withSessionAsWritten(ctx context.Context, lines []string) context.Context {
	var written baggage.Baggage
	switch len(lines) {
	case 0:
		return propagation.WithoutSession(ctx)
	case 1:
		written, _ = baggage.Parse(lines[0]) // the propagator wrote it from a Baggage
	default:
		written, _ = baggage.Parse(strings.Join(lines, ","))
	}
	return baggage.ContextWithBaggage(ctx, written)
}

// destOf describes a call for the outbound policy.
func (c *config) destOf(cc *grpc.ClientConn, method string) propagation.Dest {
	var target string
	if cc != nil {
		target = cc.Target()
	}
	// A connection's target never changes, and interceptors usually serve
	// one connection: its authority is worked out once (for a
	// "dns:///host:port" target that is a url.Parse), not per call.
	t := c.lastTarget.Load()
	if t == nil || t.target != target {
		n := namesOf(target)
		t = &n
		c.lastTarget.Store(t)
	}
	return t.dest(method)
}

// targetNames is what destOf works out from a connection's target.
type targetNames struct{ target, authority, name string }

func namesOf(target string) targetNames {
	t := targetNames{target: target, authority: targetAuthority(target)}
	t.name = t.authority
	if h, _, err := net.SplitHostPort(t.authority); err == nil {
		t.name = h
	}
	return t
}

func (t *targetNames) dest(method string) propagation.Dest {
	return propagation.Dest{
		Transport: propagation.TransportGRPC,
		Name:      t.name,
		URL:       &url.URL{Scheme: "grpc", Host: t.authority, Path: method},
	}
}

// targetAuthority returns the host[:port] a gRPC target names:
// "dns:///notify.internal:443" and "notify.internal:443" both name
// "notify.internal:443". A target with a DNS server authority
// ("dns://8.8.8.8/notify.internal") names the endpoint, not the DNS server.
func targetAuthority(target string) string {
	if i := strings.Index(target, "://"); i >= 0 {
		if u, err := url.Parse(target); err == nil {
			if ep := strings.TrimPrefix(u.Path, "/"); ep != "" {
				return ep
			}
			return u.Host
		}
		return target[i+3:]
	}
	if rest, ok := strings.CutPrefix(target, "unix:"); ok {
		return rest
	}
	return target
}
