package grpcsession_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
)

// TestClientDestPerTarget: one client interceptor serving connections to
// different targets, in turn, describes each call by its own target (the
// interceptor keeps the last target it worked out).
func TestClientDestPerTarget(t *testing.T) {
	var got propagation.Dest
	client := grpcsession.UnaryClientInterceptor(grpcsession.WithPropagator(w3c),
		grpcsession.WithOutbound(propagation.NewOutbound(func(_ context.Context, d propagation.Dest) bool { got = d; return true })))
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	targets := []struct{ target, name, url string }{
		{"dns:///notify.internal:443", "notify.internal", "grpc://notify.internal:443/notify.v1.Notify/Send"},
		{"billing.internal:8443", "billing.internal", "grpc://billing.internal:8443/notify.v1.Notify/Send"},
		{"dns://8.8.8.8/audit.internal", "audit.internal", "grpc://audit.internal/notify.v1.Notify/Send"},
	}
	conns := make([]*grpc.ClientConn, len(targets))
	for i, tc := range targets {
		conn, err := grpc.NewClient(tc.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns[i] = conn
	}
	session := otelsession.Bind(context.Background(), benchSession)
	for round := range 3 {
		for i, tc := range targets {
			if err := client(session, "/notify.v1.Notify/Send", nil, nil, conns[i], invoker); err != nil {
				t.Fatal(err)
			}
			if got.Transport != propagation.TransportGRPC || got.Name != tc.name || got.URL == nil || got.URL.String() != tc.url {
				t.Errorf("round %d, target %q: the policy saw %+v (URL %v), want name %q, URL %s", round, tc.target, got, got.URL, tc.name, tc.url)
			}
		}
	}
}
