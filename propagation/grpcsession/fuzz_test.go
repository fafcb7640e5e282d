package grpcsession

import (
	"context"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

var fuzzKey = propagation.Key{ID: "k1", Secret: []byte("grpc fuzz secret, at least 32 bytes")}

// fuzzClock is the signer's and the verifier's clock: the seeds stay valid.
var fuzzClock = func() time.Time { return time.Unix(1_767_225_600, 0) }

// fuzzSpanContext is a remote span context, as otelgrpc's server handler
// leaves one in a call's context without a tracer provider.
var fuzzSpanContext = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35}, SpanID: trace.SpanID{0x00, 0xf0, 0x67},
	TraceFlags: trace.FlagsSampled, Remote: true,
})

// fuzzSession is the session the signed seed carries.
var fuzzSession = otelsession.Session{Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100", UserID: "U1", Cron: otelsession.CronOff}

// signedBaggage is the baggage entry of fuzzSession signed with fuzzKey.
func signedBaggage(tb testing.TB) string {
	signer, err := propagation.NewSigner(fuzzKey, propagation.WithClock(fuzzClock))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, err := signer.Sign(otelsession.Bind(context.Background(), fuzzSession))
	if err != nil {
		tb.Fatal(err)
	}
	c := otelprop.MapCarrier{}
	otelprop.Baggage{}.Inject(ctx, c)
	return c["baggage"]
}

// incoming builds incoming metadata from the fuzz input: one entry per line,
// "key\tvalue", or a "baggage" value when the line has no tab; keys are
// taken as written (Baggage, BAGGAGE, baggage-bin, :authority …).
func incoming(raw string) metadata.MD {
	md := metadata.MD{}
	for line := range strings.SplitSeq(raw, "\n") {
		k, v, ok := strings.Cut(line, "\t")
		if !ok {
			k, v = "baggage", line
		}
		md[k] = append(md[k], v)
	}
	return md
}

// FuzzServerMetadata feeds arbitrary incoming metadata to the unary server
// interceptor, alone and behind a stats handler that left a span context,
// and to an Edge (its propagator as otelgrpc's server handler runs it, then
// its interceptor): the three must agree whenever no key is spelled twice
// (gRPC's copy of metadata that spells one twice keeps either list). The
// policy trusts the peer when trusted is set and otherwise accepts only
// sessions signed with fuzzKey; the seeds hold one signed session.
// Whatever the input:
//   - without WithUnauthenticated the handler runs exactly once; with it,
//     it runs exactly when the session was accepted, and the call otherwise
//     fails with an error;
//   - from an untrusted peer the handler's session is wholly Unset or
//     exactly the signed one;
//   - when the handler's context has no session, the incoming metadata it
//     can read holds no session member in any baggage entry of any spelling,
//     and no baggage-bin entry;
//   - every Set value is valid UTF-8 without NUL, CR or LF;
//   - the call's incoming metadata, which gRPC shares, is never written.
//
// Run it with
//
//	go test ./propagation/grpcsession -run '^$' -fuzz '^FuzzServerMetadata$' -fuzztime 20s -parallel 1
func FuzzServerMetadata(f *testing.F) {
	signed := signedBaggage(f)
	for _, seed := range []string{
		"", signed, signed + "\napp.x=1", signed + "\n" + signed,
		"Baggage\t" + signed, "baggage-bin\t" + signed, signed + "\nbaggage-bin\tx",
		strings.Replace(signed, "session.user_id=U1", "session.user_id=U2", 1),
		"session.chat_id=c,session.thread_id=t", "session%2Echat_id=c", "SESSION.CHAT_ID=c",
		"session.chat_id=%FF", "session.ui_session_id=x", ":authority\tgateway.internal\n" + signed,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	verifier, err := propagation.NewVerifier([]propagation.Key{fuzzKey}, propagation.WithClock(fuzzClock))
	if err != nil {
		f.Fatal(err)
	}
	want := map[otelsession.Field]string{}
	bound := otelsession.Bind(context.Background(), fuzzSession)
	for _, fl := range otelsession.Fields() {
		if v, st := otelsession.Lookup(bound, fl); st != otelsession.Unset && fl.Scope() != otelsession.Local {
			want[fl] = v
		}
	}
	w3c := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	info := &grpc.UnaryServerInfo{FullMethod: "/svc.v1.Svc/Call"}
	pr := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}}

	f.Fuzz(func(t *testing.T, raw string, trusted bool) {
		trust := propagation.TrustNone
		if trusted {
			trust = propagation.TrustAll
		}
		md := incoming(raw)
		// The call's own metadata is gRPC's: nothing may write it.
		defer func(was metadata.MD) {
			if !maps.EqualFunc(md, was, slices.Equal) {
				t.Fatalf("the call's metadata became %q, was %q", md, was)
			}
		}(md.Copy())
		// Two spellings of one key ("Baggage" beside "baggage") never come
		// over the wire; gRPC's own copies keep either list. Only without
		// them do the two paths see the same lines.
		oneSpelling := true
		lower := map[string]bool{}
		for k := range md {
			oneSpelling = oneSpelling && !lower[strings.ToLower(k)]
			lower[strings.ToLower(k)] = true
		}
		for _, unauth := range []bool{false, true} {
			opts := []Option{WithPropagator(w3c), WithInbound(propagation.NewInbound(trust, propagation.WithVerifier(verifier)))}
			if unauth {
				opts = append(opts, WithUnauthenticated())
			}
			var first map[otelsession.Field]string
			var firstErr error
			for _, path := range []string{"interceptor", "interceptor behind a stats handler", "edge"} {
				edge := path == "edge"
				interceptor := UnaryServerInterceptor(opts...)
				ctx := peer.NewContext(metadata.NewIncomingContext(context.Background(), md), pr)
				if path == "interceptor behind a stats handler" {
					// The span context otelgrpc leaves without a tracer
					// provider: the interceptor then extracts the baggage
					// alone, and must decide as without it.
					ctx = trace.ContextWithRemoteSpanContext(ctx, fuzzSpanContext)
				}
				if edge {
					// What otelgrpc's server handler does with the Edge's
					// propagator, then the Edge's interceptor.
					e := New(opts...)
					interceptor = e.UnaryServerInterceptor()
					m, _ := metadata.FromIncomingContext(ctx)
					ctx = e.Propagator().Extract(ctx, otelgrpcCarrier{m})
				}
				runs := 0
				var seen map[otelsession.Field]string
				var handlerCtx context.Context
				_, err := interceptor(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
					runs++
					handlerCtx = ctx
					seen = map[otelsession.Field]string{}
					for _, fl := range otelsession.Fields() {
						if v, st := otelsession.Lookup(ctx, fl); st != otelsession.Unset {
							seen[fl] = v
						}
					}
					return nil, nil
				})
				switch {
				case path == "interceptor":
					first, firstErr = seen, err
				case !edge && oneSpelling && (!maps.Equal(seen, first) || (err == nil) != (firstErr == nil)):
					t.Fatalf("the interceptor behind a stats handler gave %v (%v), alone %v (%v)", seen, err, first, firstErr)
				case edge && oneSpelling && (!maps.Equal(seen, first) || (err == nil) != (firstErr == nil)):
					t.Fatalf("the Edge's propagator and interceptor gave %v (%v), the interceptor alone %v (%v)", seen, err, first, firstErr)
				}
				checkServerOutcome(t, runs, seen, handlerCtx, err, unauth, trusted, want)
			}
		}
	})
}

// checkServerOutcome holds one call of FuzzServerMetadata to its rules.
func checkServerOutcome(t *testing.T, runs int, seen map[otelsession.Field]string, handlerCtx context.Context, err error, unauth, trusted bool, want map[otelsession.Field]string) {
	t.Helper()
	switch {
	case !unauth && (runs != 1 || err != nil):
		t.Fatalf("handler ran %d times, error %v", runs, err)
	case unauth && runs == 1 && (err != nil || len(seen) == 0):
		t.Fatalf("WithUnauthenticated ran the handler without a session (%v)", err)
	case unauth && runs == 0 && err == nil:
		t.Fatal("WithUnauthenticated neither ran the handler nor failed the call")
	case runs == 0:
		return
	}
	if !trusted && len(seen) > 0 && !maps.Equal(seen, want) {
		t.Fatalf("an untrusted peer's unsigned or forged session was accepted: %v", seen)
	}
	for fl, v := range seen {
		if strings.ContainsAny(v, "\x00\r\n") || !utf8.ValidString(v) {
			t.Fatalf("%s = %q", fl, v)
		}
	}
	if len(seen) > 0 {
		return
	}
	md, _ := metadata.FromIncomingContext(handlerCtx)
	for k, vs := range md {
		if strings.EqualFold(k, baggageBinKey) {
			t.Fatalf("the handler can read %s: %q", k, vs)
		}
		if !strings.EqualFold(k, baggageKey) {
			continue
		}
		for _, l := range vs {
			b, _ := baggage.Parse(l)
			for _, m := range b.Members() {
				if otelsession.OwnedKey(m.Key()) {
					t.Fatalf("the handler got no session but can read %q in its metadata", l)
				}
			}
		}
	}
}

// otelgrpcCarrier is otelgrpc's metadataSupplier: Get returns the first
// value only, and there is no Values method.
type otelgrpcCarrier struct{ md metadata.MD }

func (s otelgrpcCarrier) Get(key string) string {
	if v := s.md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (s otelgrpcCarrier) Set(key, value string) { s.md.Set(key, value) }

func (s otelgrpcCarrier) Keys() []string {
	out := make([]string, 0, len(s.md))
	for k := range s.md {
		out = append(out, k)
	}
	return out
}
