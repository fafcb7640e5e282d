package httpsession_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

var testKey = propagation.Key{ID: "k1", Secret: []byte("http test secret, at least 32 bytes")}

// signerAndVerifier returns a Signer and a Verifier of testKey.
func signerAndVerifier(t *testing.T) (*propagation.Signer, *propagation.Verifier) {
	t.Helper()
	signer, err := propagation.NewSigner(testKey)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := propagation.NewVerifier([]propagation.Key{testKey})
	if err != nil {
		t.Fatal(err)
	}
	return signer, verifier
}

// A signed session, sent through the client Transport with otelhttp in front
// of it or behind it: a host the egress allowlist names receives the session
// and its signature, and its Handler, which trusts no peer, accepts the
// session on the signature; a host outside the allowlist receives neither a
// session member nor the signature, even one other code already wrote into
// the request's headers.
func TestSignedSessionAndEgress(t *testing.T) {
	signer, verifier := signerAndVerifier(t)
	for _, serverOrder := range []string{"otelhttp(Handler(app))", "Handler(otelhttp(app))"} {
		for _, clientOrder := range []string{"otelhttp(Transport)", "Transport{Base: otelhttp}"} {
			t.Run(fmt.Sprintf("server=%s/client=%s", serverOrder, clientOrder), func(t *testing.T) {
				t.Parallel()
				tp := sdktrace.NewTracerProvider()
				t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				internalPolicy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
				internal := startSite(t, serverOrder, tp, internalPolicy)
				third := startSite(t, serverOrder, tp, propagation.NewInbound(propagation.TrustAll, propagation.WithVerifier(verifier)))

				base := &http.Transport{}
				t.Cleanup(base.CloseIdleConnections)
				egress := propagation.Egress{Prefixes: []string{internal.url}}
				otelOpts := []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(w3c)}
				var rt http.RoundTripper
				if clientOrder == "otelhttp(Transport)" {
					rt = otelhttp.NewTransport(&httpsession.Transport{Base: base, Propagator: w3c, Outbound: propagation.NewOutbound(propagation.AllowURLs(egress))}, otelOpts...)
				} else {
					rt = &httpsession.Transport{Base: otelhttp.NewTransport(base, otelOpts...), Propagator: w3c, Outbound: propagation.NewOutbound(propagation.AllowURLs(egress))}
				}
				client := &http.Client{Transport: rt}

				session := otelsession.Session{Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100", UserID: "U1"}
				ctx, err := signer.Sign(otelsession.Bind(context.Background(), session))
				if err != nil {
					t.Fatal(err)
				}
				sig := baggage.FromContext(ctx).Member(otelsession.SignatureKey).Value()
				app, _ := baggage.NewMemberRaw("app.tenant", "acme")
				bg, _ := baggage.FromContext(ctx).SetMember(app)
				ctx = baggage.ContextWithBaggage(ctx, bg)

				// To the allowed host: session and signature on the wire,
				// accepted on the signature by a server that trusts no peer.
				r := get(t, ctx, client, internal.url+"/notify", internal.got)
				wire := waitSite(t, internal)
				if got, ok := (received{baggage: wire}).member(otelsession.SignatureKey); !ok || got != sig {
					t.Errorf("allowed host: signature on the wire = %q (present %v), want %q", got, ok, sig)
				}
				want := sessionOf(otelsession.Bind(context.Background(), session))
				maps.DeleteFunc(want, func(f otelsession.Field, _ string) bool { return f.Scope() == otelsession.Local })
				if !maps.Equal(r.session, want) {
					t.Errorf("allowed host: handler saw %v, want %v", r.session, want)
				}
				if c := internalPolicy.Counts(); c.Signed != 1 || c.Accepted != 1 {
					t.Errorf("allowed host: policy counts %+v, want one signed session accepted", c)
				}

				// To a host outside the allowlist: neither, whoever wrote them.
				for _, preset := range []string{"", otelsession.SignatureKey + "=" + sig + ",app.preset=1"} {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, third.url+"/notify", nil)
					if err != nil {
						t.Fatal(err)
					}
					if preset != "" {
						req.Header.Set("Baggage", preset)
					}
					r := do(t, client, req, third.got)
					wire := waitSite(t, third)
					if (received{baggage: wire}).hasSessionMember() {
						t.Errorf("third party (preset %q): session or signature on the wire: %q", preset, wire)
					}
					if len(r.session) > 0 || r.ctxBaggage[otelsession.SignatureKey] != "" {
						t.Errorf("third party (preset %q): handler saw session %v, baggage %v", preset, r.session, r.ctxBaggage)
					}
					if r.ctxBaggage["app.tenant"] != "acme" {
						t.Errorf("third party (preset %q): app.tenant = %q, want it sent", preset, r.ctxBaggage["app.tenant"])
					}
				}
			})
		}
	}
}

// waitSite returns the baggage lines a site received and waits until its
// handler chain has returned.
func waitSite(t *testing.T, s *site) []string {
	t.Helper()
	wire := <-s.wire
	select {
	case <-s.finished:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler chain did not return")
	}
	return wire
}

// A Transport whose policy signs, with otelhttp in front of it or behind
// it: behind it, otelhttp injects the request context's baggage again, so
// the context the Transport hands on must hold the signature it sent. The
// allowed host receives one baggage line with one signature, which its
// Handler, trusting no peer, accepts.
func TestTransportSignsAndWhatInjectsAgainKeepsTheSignature(t *testing.T) {
	signer, verifier := signerAndVerifier(t)
	for _, clientOrder := range []string{"otelhttp(Transport)", "Transport{Base: otelhttp}"} {
		t.Run(clientOrder, func(t *testing.T) {
			tp := sdktrace.NewTracerProvider()
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
			internal := startSite(t, "otelhttp(Handler(app))", tp, policy)
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Prefixes: []string{internal.url}}), propagation.WithSigner(signer))
			otelOpts := []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(w3c)}
			var rt http.RoundTripper
			if clientOrder == "otelhttp(Transport)" {
				rt = otelhttp.NewTransport(&httpsession.Transport{Base: base, Propagator: w3c, Outbound: out}, otelOpts...)
			} else {
				rt = &httpsession.Transport{Base: otelhttp.NewTransport(base, otelOpts...), Propagator: w3c, Outbound: out}
			}
			session := otelsession.Session{Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100", UserID: "U1"}
			r := get(t, otelsession.Bind(context.Background(), session), &http.Client{Transport: rt}, internal.url+"/notify", internal.got)
			wire := waitSite(t, internal)
			if len(wire) != 1 || strings.Count(wire[0], otelsession.SignatureKey+"=") != 1 {
				t.Errorf("baggage on the wire: %q, want one line with one signature", wire)
			}
			if c := policy.Counts(); c.Signed != 1 || c.Accepted != 1 {
				t.Errorf("policy counts %+v, want one signed session accepted", c)
			}
			if r.session[otelsession.FieldChatID] != session.ChatID {
				t.Errorf("handler saw %v", r.session)
			}
			if c := out.Counts(); c.Signed != 1 {
				t.Errorf("outbound counts %+v", c)
			}
		})
	}
}
