package httpsession

// Each boundary beside the raw OpenTelemetry path it should be compared
// with, as sub-benchmarks path=raw and path=session run one after the other
// (benchstat -col /path sets them side by side). Run:
//
//	go test -run '^$' -bench . -benchmem -count 8 -benchtime 0.3s ./propagation/httpsession/

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

// benchSession sets every field: 16 baggage members on the wire.
var benchSession = otelsession.Session{
	Platform: "telegram", Source: "gateway", ChatID: "-1001234567890", ChatType: "supergroup",
	ChatName: "Ops – EU", ThreadID: "17585", UserID: "u-42", UserIDAlt: "@ana",
	UserName: "Ana Lúcia", ScopeID: "guild-7", SessionKey: "agent:main:telegram:-1001234567890:17585",
	SessionID: "20261214_101010_ab12cd", UISessionID: "tab-3", MessageID: "88121",
	Profile: "default", BrowserControlPrincipal: "ana", BrowserControlTransportFamily: "cdp",
	ParentChatID: "-1001234567000", Cron: otelsession.CronOn, Cwd: "/srv/work",
}

var (
	sinkCtx context.Context
	sinkReq *http.Request
)

// BenchmarkInbound compares the inbound policy with the plain OTel baggage
// extraction of the same header (a full session, as Bind and the stock
// propagator write it), through both carrier kinds. The policy trusts the
// peer, so the session is accepted: the whole path runs.
func BenchmarkInbound(b *testing.B) {
	h := http.Header{}
	otelprop.Baggage{}.Inject(otelsession.Bind(context.Background(), benchSession), otelprop.HeaderCarrier(h))
	m := otelprop.MapCarrier{"baggage": h.Get("Baggage")}
	prop := otelprop.Baggage{}
	peer := propagation.Peer{Transport: "http", Addr: netip.MustParseAddr("127.0.0.1")}
	bg := context.Background()
	for _, c := range []struct {
		name    string
		carrier otelprop.TextMapCarrier
	}{{"HeaderCarrier", otelprop.HeaderCarrier(h)}, {"MapCarrier", m}} {
		b.Run(c.name+"/path=raw", func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				sinkCtx = prop.Extract(bg, c.carrier)
			}
		})
		b.Run(c.name+"/path=session", func(b *testing.B) {
			// The same carrier again and again: without the cache, which
			// would serve every extraction but the first (the rows below
			// measure it, on the lines of distinct sessions and of one
			// conversation's messages).
			policy := propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(0))
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				ctx, err := policy.Extract(bg, prop, c.carrier, peer)
				if err != nil {
					b.Fatal(err)
				}
				sinkCtx = ctx
			}
		})
	}
	// The policy's cache of accepted sessions, from a MapCarrier: the lines
	// of 4,096 distinct sessions in turn, more than the cache notes (each
	// one first seen: noted, no entry made), and of 1,024 messages of
	// one conversation, each injected on its own as a sender does (its
	// members in another order each time, its own message id: each served
	// from the entry of the one before). The raw path extracts the same
	// lines in the same turn.
	lines := func(n int, vary func(s *otelsession.Session, i int)) []otelprop.MapCarrier {
		cs := make([]otelprop.MapCarrier, n)
		for i := range cs {
			s := benchSession
			vary(&s, i)
			cs[i] = otelprop.MapCarrier{}
			prop.Inject(otelsession.Bind(context.Background(), s), cs[i])
		}
		return cs
	}
	for _, c := range []struct {
		name     string
		carriers []otelprop.MapCarrier
	}{
		{"MapCarrier_first_seen", lines(4096, func(s *otelsession.Session, i int) { s.ChatID = fmt.Sprintf("-100%010d", i) })},
		{"MapCarrier_next_message", lines(1024, func(s *otelsession.Session, i int) { s.MessageID = strconv.Itoa(88121 + i) })},
	} {
		b.Run(c.name+"/path=raw", func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sinkCtx = prop.Extract(bg, c.carriers[i%len(c.carriers)])
				i++
			}
		})
		b.Run(c.name+"/path=session", func(b *testing.B) {
			policy := propagation.NewInbound(propagation.TrustAll)
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				ctx, err := policy.Extract(bg, prop, c.carriers[i%len(c.carriers)], peer)
				if err != nil {
					b.Fatal(err)
				}
				sinkCtx = ctx
				i++
			}
			b.StopTimer()
			// A conversation's first message is noted, its second makes
			// the entry, every later one is served; a session first seen
			// is never served (the 4,096 come round again only past
			// the cache's notes).
			served, want := policy.Counts().Cached, uint64(max(i-2, 0))
			if c.name == "MapCarrier_first_seen" {
				want = 0
			}
			if served != want && (c.name != "MapCarrier_first_seen" || served > uint64(i)/10) {
				b.Fatalf("%d of %d extractions served from the cache, want %d", served, i, want)
			}
		})
	}
	// The handler's whole per-request step (peer, policy, request copy)
	// around a handler that does nothing, beside a hand-written handler that
	// extracts with the stock propagator and copies the request.
	var next http.HandlerFunc = func(_ http.ResponseWriter, r *http.Request) { sinkCtx = r.Context() }
	r := httptest.NewRequest(http.MethodGet, "http://notify.internal/", nil)
	r.Header = h
	r.RemoteAddr = "127.0.0.1:50000"
	b.Run("Handler/path=raw", func(b *testing.B) {
		var hd http.HandlerFunc = func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(prop.Extract(r.Context(), otelprop.HeaderCarrier(r.Header))))
		}
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			hd.ServeHTTP(nil, r)
		}
	})
	b.Run("Handler/path=session", func(b *testing.B) {
		hd := Handler(next, WithPropagator(prop), WithInbound(propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(0))))
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			hd.ServeHTTP(nil, r)
		}
	})
}

// BenchmarkOutbound compares the Transport's injection step (copy the
// request, decide, inject; strip for a withheld host; sign) with the plain
// OTel injection of the same full session into a copy of the request. The
// signed step has a second baseline, path=raw_signed: the same signed bytes
// sent without sessionwire (the signature computed with crypto/hmac over the
// Signer's input and added with Baggage.SetMember; sessiontest.RawSigner),
// the request copied with the signed context.
func BenchmarkOutbound(b *testing.B) {
	ctx := otelsession.Bind(context.Background(), benchSession)
	prop := otelprop.Baggage{}
	allowed, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://notify.internal/v1/send", nil)
	if err != nil {
		b.Fatal(err)
	}
	withheld, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/v1/send", nil)
	if err != nil {
		b.Fatal(err)
	}
	key := propagation.Key{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}
	clock := func() time.Time { return time.Unix(1_767_225_600, 0) }
	signer, err := propagation.NewSigner(key, propagation.WithClock(clock))
	if err != nil {
		b.Fatal(err)
	}
	internal := propagation.AllowURLs(propagation.Egress{Hosts: []string{".internal"}})
	plain := &Transport{Propagator: prop, Outbound: propagation.NewOutbound(internal)}
	signed := &Transport{Propagator: prop, Outbound: propagation.NewOutbound(internal, propagation.WithSigner(signer))}

	raw := func(req *http.Request) func(*testing.B) {
		return func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				r := req.Clone(ctx)
				prop.Inject(ctx, otelprop.HeaderCarrier(r.Header))
				sinkReq = r
			}
		}
	}
	session := func(t *Transport, req *http.Request) func(*testing.B) {
		return func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				sinkReq = t.prepare(req)
			}
		}
	}
	b.Run("Transport_allowed/path=raw", raw(allowed))
	b.Run("Transport_allowed/path=session", session(plain, allowed))
	b.Run("Transport_withheld/path=raw", raw(withheld))
	b.Run("Transport_withheld/path=session", session(plain, withheld))
	b.Run("Transport_signed/path=raw", raw(allowed))
	b.Run("Transport_signed/path=raw_signed", func(b *testing.B) {
		rs := sessiontest.NewRawSigner(key.ID, key.Secret, clock)
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			signed, err := rs.Sign(ctx, "")
			if err != nil {
				b.Fatal(err)
			}
			r := allowed.Clone(signed)
			prop.Inject(signed, otelprop.HeaderCarrier(r.Header))
			sinkReq = r
		}
	})
	b.Run("Transport_signed/path=session", session(signed, allowed))
}
