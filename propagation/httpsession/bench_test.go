package httpsession

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
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

var sinkCtx context.Context

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
		b.Run(c.name+"/otel", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkCtx = prop.Extract(bg, c.carrier)
			}
		})
		b.Run(c.name+"/policy", func(b *testing.B) {
			policy := propagation.NewInbound(propagation.TrustAll)
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
	// The handler's whole per-request step (peer, policy, request copy)
	// around a handler that does nothing.
	b.Run("HeaderCarrier/Handler", func(b *testing.B) {
		var next http.HandlerFunc = func(_ http.ResponseWriter, r *http.Request) { sinkCtx = r.Context() }
		hd := Handler(next, WithPropagator(prop), WithInbound(propagation.NewInbound(propagation.TrustAll)))
		r := httptest.NewRequest(http.MethodGet, "http://notify.internal/", nil)
		r.Header = h
		r.RemoteAddr = "127.0.0.1:50000"
		b.ReportAllocs()
		for b.Loop() {
			hd.ServeHTTP(nil, r)
		}
	})
}

// BenchmarkOutbound compares the Transport's injection step (copy the
// request, decide, inject; strip for a denied host) with the plain OTel
// injection of the same full session.
func BenchmarkOutbound(b *testing.B) {
	ctx := otelsession.Bind(context.Background(), benchSession)
	prop := otelprop.Baggage{}
	allowed, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://notify.internal/v1/send", nil)
	if err != nil {
		b.Fatal(err)
	}
	denied, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/v1/send", nil)
	if err != nil {
		b.Fatal(err)
	}
	t := &Transport{Propagator: prop, Outbound: propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{".internal"}}))}
	var sink *http.Request

	b.Run("otel/Inject", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h := make(http.Header, 1)
			prop.Inject(ctx, otelprop.HeaderCarrier(h))
		}
	})
	b.Run("otel/Clone+Inject", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := allowed.Clone(ctx)
			prop.Inject(ctx, otelprop.HeaderCarrier(r.Header))
			sink = r
		}
	})
	b.Run("Transport/allowed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = t.prepare(allowed)
		}
	})
	b.Run("Transport/denied", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = t.prepare(denied)
		}
	})
	_ = sink
}
