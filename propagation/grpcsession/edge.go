package grpcsession

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/stockprop"
)

// Edge is a program's gRPC edge for sessions: the server and client
// interceptors and a propagator for otelgrpc, all built from one list of
// Options. Give otelgrpc the propagator and gRPC the interceptors:
//
//	edge := grpcsession.New(grpcsession.WithInbound(inbound), grpcsession.WithOutbound(outbound))
//	srv := grpc.NewServer(append(edge.ServerOptions(),
//		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithPropagators(edge.Propagator()))))...)
//	conn, err := grpc.NewClient(target, append(edge.DialOptions(),
//		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(edge.Propagator()))))...)
//
// The policy then runs inside otelgrpc's own propagation step, where it
// extracts and injects, so each call's metadata is copied once, the
// trace context and the baggage are written once, and otelgrpc's server
// span starts from the session the policy accepted (with sessiontrace's
// span processor, the accepted session is on that span without
// [WithOnAccept]). See [Edge.Propagator] for what each side does, and what
// happens when one half runs without the other.
//
// An Edge is safe for concurrent use and serves any number of servers and
// connections.
type Edge struct{ c *config }

// New returns the Edge configured by opts, the same Options the
// package-level interceptor functions take.
func New(opts ...Option) *Edge { return &Edge{c: newConfig(opts)} }

// ServerOptions returns the Edge's unary and stream server interceptors, for
// grpc.NewServer beside otelgrpc's server handler given [Edge.Propagator].
func (e *Edge) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(e.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(e.StreamServerInterceptor()),
	}
}

// DialOptions returns the Edge's unary and stream client interceptors, for
// grpc.NewClient beside otelgrpc's client handler given [Edge.Propagator].
// Give them last among interceptors, as [DialOptions].
func (e *Edge) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(e.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(e.StreamClientInterceptor()),
	}
}

// UnaryServerInterceptor is [UnaryServerInterceptor] for this Edge: it acts
// on the verdict the Edge's propagator reached in otelgrpc's handler, and
// judges the call itself when there is none.
func (e *Edge) UnaryServerInterceptor() grpc.UnaryServerInterceptor { return e.c.unaryServer() }

// StreamServerInterceptor is [StreamServerInterceptor] for this Edge; see
// [Edge.UnaryServerInterceptor].
func (e *Edge) StreamServerInterceptor() grpc.StreamServerInterceptor { return e.c.streamServer() }

// UnaryClientInterceptor is [UnaryClientInterceptor] for this Edge: on a
// connection whose otelgrpc handler runs the Edge's propagator it only
// names the call's destination for it; see [Edge.Propagator].
func (e *Edge) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	c := e.c
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		return c.edgeCall(ctx, cc, method, func(ctx context.Context) error {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		})
	}
}

// StreamClientInterceptor is [StreamClientInterceptor] for this Edge; see
// [Edge.UnaryClientInterceptor].
func (e *Edge) StreamClientInterceptor() grpc.StreamClientInterceptor {
	c := e.c
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		var cs grpc.ClientStream
		err := c.edgeCall(ctx, cc, method, func(ctx context.Context) error {
			var err error
			cs, err = streamer(ctx, desc, cc, method, callOpts...)
			return err
		})
		return cs, err
	}
}

// ErrWithoutInterceptor is what the Edge's propagator reports (to
// [WithOnError], else otel.Handle) when it injects for a call that did not
// go through the same Edge's client interceptor: it cannot name the call's
// destination, so it sends no session.
var ErrWithoutInterceptor = errors.New("the call did not pass the Edge's client interceptor (give grpc.NewClient edge.DialOptions()), so its destination is unknown; the session was not sent")

// Propagator returns the propagator to give otelgrpc on both sides,
// otelgrpc.WithPropagators(edge.Propagator()). It carries the trace context
// and the baggage with the propagator of [WithPropagator] (by default
// otel.GetTextMapPropagator(), read per call), and applies the Edge's
// policies as it does. Give it to otelgrpc as its whole propagator: a
// baggage propagator composed after it, or a second stats handler that
// injects after otelgrpc, would write the baggage again as the context holds
// it.
//
// Server (otelgrpc's handler extracts before it starts the server span):
// Extract runs the inbound policy on the call's metadata, with the peer of
// the connection, and records its verdict in the context it returns. The
// server span starts from that context, so it carries the accepted session
// or none. The Edge's server interceptors find the verdict and act on it
// (the handler's context, [WithUnauthenticated], [WithOnError],
// [WithOnAccept], the span event of a refusal, the metadata the handler
// reads); they do not extract again. Without them, the policy still
// decides the session of the handler's context, but those options do not
// run and the incoming metadata the handler can read is not re-encoded (a
// refused session's baggage line is still there to read). A call whose metadata has several "baggage" entries or a
// "baggage-bin" entry, which only the interceptors judge, gets no verdict
// here: otelgrpc extracts only its trace context, and the interceptors
// decide as without this propagator.
//
// Client (otelgrpc's handler starts the client span, then injects): the
// policy needs the call's destination, which only the interceptor knows.
// The Edge's client interceptor names it in the call's context; Inject
// applies the outbound policy there (removing session members the outgoing
// metadata already held, sending the session only where the policy
// allows, signed when it signs) and writes the trace context and baggage
// once. The interceptor learns, per connection, whether its otelgrpc
// handler runs this propagator: until it has seen it run, it writes the
// metadata itself, as [DialOptions] does, and Inject writes only the trace
// context. So a connection whose otelgrpc was not given the propagator
// (or that has no otelgrpc) still sends the session as the policy allows,
// never unchecked, at the cost of the interceptor-only path.
//
// Inject for a call that did not pass the Edge's client interceptor (the
// propagator given to otelgrpc without edge.DialOptions) fails closed: the
// trace context and the application's own baggage are written, no session
// member is, and [ErrWithoutInterceptor] is reported.
func (e *Edge) Propagator() otelprop.TextMapPropagator { return edgePropagator{e.c} }

type edgePropagator struct{ c *config }

func (p edgePropagator) prop() otelprop.TextMapPropagator {
	if p.c.prop != nil {
		return p.c.prop
	}
	return otel.GetTextMapPropagator()
}

func (p edgePropagator) Fields() []string { return p.prop().Fields() }

// verdict is what the Edge's propagator decided for one incoming call.
type verdict struct {
	c   *config
	err error
	bag baggage.Baggage // the accepted baggage: the handler's
	// present is whether bag holds a session (propagation.HasSession).
	present bool
	// quiet is whether the lines name no session (stockprop.NoSession): no
	// session was offered.
	quiet bool
	lines []string // the baggage lines judged
	// md, when not nil, is the incoming metadata the lines were read from,
	// the call's own map, in which they are all the baggage there is.
	md metadata.MD
}

// judgedOnly reports whether ctx's incoming metadata holds no baggage but
// the lines judged: at once when it is still the map they were read from,
// else by reading it (the package's judgedOnly).
func (v *verdict) judgedOnly(ctx context.Context) bool {
	if v.md != nil {
		if md, ok := incomingMD(ctx); ok && sameMD(md, v.md) {
			return true
		}
	}
	return judgedOnly(ctx, v.lines)
}

// verdictKey is the key under which the context an Edge's propagator
// returns holds what it decided: the Edge's *verdict, or, for a session it
// accepted whole, the *sessionstate.RecordContext the inbound policy
// returned, answering for its config (the accepted baggage is its
// record's).
type verdictKey struct{ c *config }

func (p edgePropagator) Extract(ctx context.Context, carrier otelprop.TextMapCarrier) context.Context {
	c := p.c
	// otelgrpc's carrier is its copy of the incoming metadata, whose Get
	// returns the first value of a key only. The count of baggage lines,
	// and a baggage-bin entry, come from the call's context without copying
	// the metadata again.
	md, raw := incomingMD(ctx)
	var lines []string
	if raw {
		// One pass over the call's own map, which is not copied.
		var other bool
		if lines, other = baggageOf(md); other {
			return c.except.Extract(ctx, carrier)
		}
	} else {
		lines = metadata.ValueFromIncomingContext(ctx, baggageKey)
		if metadata.ValueFromIncomingContext(ctx, baggageBinKey) != nil {
			return c.except.Extract(ctx, carrier)
		}
	}
	var first string
	if len(lines) == 1 {
		first = lines[0]
	}
	if len(lines) > 1 || carrier.Get(baggageKey) != first {
		// Several lines, a binary entry or another spelling of the key
		// (above), or a carrier that does not hold the call's metadata: the
		// interceptors judge it, as without this propagator.
		return c.except.Extract(ctx, carrier)
	}
	prop := c.propagator()
	var out context.Context
	var err error
	// A call without baggage, or whose one line names no session, holds
	// none once extracted (stockprop.NoSession, the policy's own rule): the
	// policy's step for it is stockprop.Extract, which consults no peer, so
	// the caller is described only for a call that may carry a session.
	quiet := stockprop.NoSession(prop, carrier, first)
	if quiet {
		out = stockprop.Extract(c.inbound, ctx, prop, carrier, first)
	} else {
		// otelgrpc's carrier has no Values method, so the policy reads
		// the one line once; any other carrier is Inbound.Extract's
		// to judge.
		out, err = c.inbound.Extract(ctx, prop, carrier, peerOf(ctx, carrier.Get(":authority")))
	}
	bag := baggage.FromContext(out)
	// Only an accepted session comes back with the record of its values on
	// top (sessionstate.Atop): a context without one holds no session. That
	// spares a call with only the application's baggage HasSession, which
	// copies the members of so small a baggage to read them.
	present := sessionstate.Atop(out, bag) && propagation.HasSession(bag)
	if rc, _ := out.(*sessionstate.RecordContext); present && err == nil && rc.OwnerKey == nil {
		// An accepted session needs nothing of the verdict but the
		// baggage, which the record holds: the inbound policy's context,
		// not yet handed on, answers for this Edge, and no verdict is
		// allocated.
		rc.OwnerKey = verdictKey{c}
		return rc
	}
	// md is nil when it could not be read in place.
	return &verdictContext{Context: out, v: verdict{c: c, err: err, bag: bag, present: present, quiet: quiet, lines: lines, md: md}}
}

// verdictContext is out with its verdict as the value of verdictKey{}: what
// context.WithValue would build, in one allocation instead of two (the
// verdict and the context holding it), on every call through the Edge.
type verdictContext struct {
	context.Context
	v verdict
}

func (c *verdictContext) Value(key any) any {
	if key == (verdictKey{c.v.c}) {
		return &c.v
	}
	return c.Context.Value(key)
}

// clientCall is what the Edge's client interceptor tells its propagator
// about one call.
type clientCall struct {
	c       *config
	d       propagation.Dest
	method  string
	written bool        // the interceptor wrote the metadata: inject the trace context only
	ran     atomic.Bool // the propagator injected for this call
}

type clientCallKey struct{}

// callContext is a call's context holding its clientCall as the value of
// clientCallKey{}: what context.WithValue would build, in one allocation
// with the call instead of two, on every call through the Edge.
type callContext struct {
	context.Context
	call clientCall
}

func (c *callContext) Value(key any) any {
	if key == (clientCallKey{}) {
		return &c.call
	}
	return c.Context.Value(key)
}

func (p edgePropagator) Inject(ctx context.Context, carrier otelprop.TextMapCarrier) {
	c := p.c
	call, _ := ctx.Value(clientCallKey{}).(*clientCall)
	if call == nil || call.c != c {
		c.injectWithoutDest(ctx, carrier)
		return
	}
	call.ran.Store(true)
	if call.written {
		c.except.Inject(ctx, carrier)
		return
	}
	if err := c.outbound.Inject(ctx, c.propagator(), carrier, call.d); err != nil {
		c.clientError(ctx, call.method, err)
	}
}

// injectWithoutDest fails closed: no destination, no session.
func (c *config) injectWithoutDest(ctx context.Context, carrier otelprop.TextMapCarrier) {
	if propagation.HasSession(baggage.FromContext(ctx)) {
		ctx = propagation.WithoutSession(ctx)
		c.clientError(ctx, "", fmt.Errorf("grpcsession: propagator: %w", ErrWithoutInterceptor))
	}
	// Inject still removes session members the carrier already holds.
	if err := c.outbound.Inject(ctx, c.propagator(), carrier, propagation.Dest{Transport: propagation.TransportGRPC}); err != nil {
		c.clientError(ctx, "", err)
	}
}

func (c *config) clientError(ctx context.Context, method string, err error) {
	if c.onError != nil {
		c.onError(ctx, method, err)
		return
	}
	if method == "" {
		otel.Handle(err) // outside a call: err names where it arose
		return
	}
	otel.Handle(fmt.Errorf("grpcsession: outgoing call %s: %w", method, err))
}

// edgeCall is the Edge's client step for one call: invoke is the rest of the
// call (gRPC's invoker or streamer, which runs the stats handlers).
func (c *config) edgeCall(ctx context.Context, cc *grpc.ClientConn, method string, invoke func(context.Context) error) error {
	st := c.conn(cc)
	cctx := &callContext{call: clientCall{c: c, method: method}}
	call := &cctx.call
	if st.paired.Load() {
		call.d = st.dest(method)
		ctx = c.withoutPrewritten(ctx, call.d)
	} else {
		// Not known to run the propagator: carry the session as the
		// interceptor-only configuration does.
		ctx = c.clientContext(ctx, cc, method)
		call.written = true
	}
	cctx.Context = ctx
	err := invoke(cctx)
	if call.written && call.ran.Load() && st != &c.nilConn {
		// gRPC runs the same stats handlers for every call of a connection.
		st.paired.Store(true)
	}
	return err
}

// withoutPrewritten removes session members from baggage entries the
// call's outgoing metadata already holds, and any baggage-bin entry, before
// otelgrpc copies it. A context without such entries (the common case) is
// returned as it is, without copying its metadata.
func (c *config) withoutPrewritten(ctx context.Context, d propagation.Dest) context.Context {
	if metadata.ValueFromOutgoingContext(ctx, baggageKey) == nil && metadata.ValueFromOutgoingContext(ctx, baggageBinKey) == nil {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	carrier := newCallMD(md)
	carrier.Delete(baggageBinKey)
	// Inject with nothing to inject: it only strips, and counts what it
	// removed as Prewritten.
	_ = c.outbound.Inject(context.Background(), noPropagator, carrier, d)
	return metadata.NewOutgoingContext(ctx, md)
}

var noPropagator = otelprop.NewCompositeTextMapPropagator()

// connState is what the Edge's client interceptor knows of one connection.
type connState struct {
	cc     weak.Pointer[grpc.ClientConn]
	names  targetNames
	paired atomic.Bool // its otelgrpc handler runs the Edge's propagator
	// urls holds the destination URL of each method called on the
	// connection (method -> *url.URL), at most maxMethodURLs of them, so that
	// a call does not allocate one: policies read a Dest's URL and do not
	// modify it, as for an HTTP request's.
	urls  sync.Map
	nURLs atomic.Int32
}

// maxMethodURLs bounds the URLs a connection keeps: a service has a few
// methods; a program that makes method names up pays for a URL per call
// beyond that, as without the cache.
const maxMethodURLs = 256

func (s *connState) dest(method string) propagation.Dest {
	if u, ok := s.urls.Load(method); ok {
		return propagation.Dest{Transport: propagation.TransportGRPC, Name: s.names.name, URL: u.(*url.URL)}
	}
	d := s.names.dest(method)
	if s.nURLs.Load() < maxMethodURLs {
		if _, loaded := s.urls.LoadOrStore(method, d.URL); !loaded {
			s.nURLs.Add(1)
		}
	}
	return d
}

// conn returns the state of cc. The last connection's is one atomic load
// away; the others are in a map that a connection leaves when it is
// garbage collected (the map holds it weakly).
func (c *config) conn(cc *grpc.ClientConn) *connState {
	if cc == nil {
		return &c.nilConn // a call without a connection (tests): never paired
	}
	if s := c.lastConn.Load(); s != nil && s.cc.Value() == cc {
		return s
	}
	wp := weak.Make(cc)
	v, ok := c.conns.Load(wp)
	if !ok {
		s := &connState{cc: wp, names: namesOf(cc.Target())}
		var loaded bool
		if v, loaded = c.conns.LoadOrStore(wp, s); !loaded {
			conns := &c.conns
			runtime.AddCleanup(cc, func(wp weak.Pointer[grpc.ClientConn]) { conns.Delete(wp) }, wp)
		}
	}
	s := v.(*connState)
	c.lastConn.Store(s)
	return s
}

// edgeState is the part of config only an Edge's client uses.
type edgeState struct {
	lastConn atomic.Pointer[connState]
	conns    sync.Map // weak.Pointer[grpc.ClientConn] -> *connState
	nilConn  connState
}
