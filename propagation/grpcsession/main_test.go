package grpcsession_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// w3c is what a program installs with otel.SetTextMapPropagator. TestMain
// installs it for the tests of the defaults; the other tests pass it.
var w3c = otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})

var testKey = propagation.Key{ID: "k1", Secret: []byte("grpc test secret, at least 32 bytes")}

func TestMain(m *testing.M) {
	otel.SetTextMapPropagator(w3c)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	goleak.VerifyTestMain(m)
}

// received is what one message handler of the test service saw.
type received struct {
	method      string
	session     map[otelsession.Field]string // Set fields, "" for Cleared
	baggage     []string                     // the "baggage" entries of the incoming metadata it can read
	binary      []string                     // its "baggage-bin" entries
	spanContext trace.SpanContext
	// inContext is the baggage of the handler's context, as a line.
	inContext string
}

// hasSessionMember reports whether the metadata the handler could read holds
// a session member in any spelling.
func (r received) hasSessionMember() bool {
	for _, l := range r.baggage {
		for m := range strings.SplitSeq(l, ",") {
			k, _, _ := strings.Cut(m, "=")
			if otelsession.OwnedKey(strings.TrimSpace(k)) {
				return true
			}
		}
	}
	return false
}

func (r received) member(key string) (string, bool) {
	for _, l := range r.baggage {
		b, _ := baggage.Parse(l)
		if m := b.Member(key); m.Key() != "" {
			return m.Value(), true
		}
	}
	return "", false
}

func sessionOf(ctx context.Context) map[otelsession.Field]string {
	m := make(map[otelsession.Field]string)
	for _, f := range otelsession.Fields() {
		if v, st := otelsession.Lookup(ctx, f); st != otelsession.Unset {
			m[f] = v
		}
	}
	return m
}

func record(ctx context.Context, method string) received {
	md, _ := metadata.FromIncomingContext(ctx)
	return received{method: method, session: sessionOf(ctx), baggage: md.Get("baggage"), binary: md.Get("baggage-bin"),
		spanContext: trace.SpanContextFromContext(ctx), inContext: baggage.FromContext(ctx).String()}
}

// service is the TestService of grpc's interop tests: UnaryCall and
// EmptyCall report what their handler saw; FullDuplexCall reports what the
// stream's context held at every message received, and keeps answering
// after the client closed its side, reporting again each time.
type service struct {
	testpb.UnimplementedTestServiceServer
	got chan received
}

func newService() *service { return &service{got: make(chan received, 64)} }

func (s *service) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.got <- record(ctx, "UnaryCall")
	return &testpb.SimpleResponse{}, nil
}

func (s *service) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	s.got <- record(ctx, "EmptyCall")
	return &testpb.Empty{}, nil
}

// afterClose is how many messages FullDuplexCall sends once the client has
// closed its side of the stream.
const afterClose = 3

func (s *service) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		s.got <- record(stream.Context(), "FullDuplexCall")
		if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	for range afterClose {
		time.Sleep(5 * time.Millisecond) // the request is over; the stream goes on
		s.got <- record(stream.Context(), "FullDuplexCall/after-close")
		if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

// next returns what the service saw next.
func (s *service) next(t *testing.T) received {
	t.Helper()
	select {
	case r := <-s.got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the service's handler did not run")
		return received{}
	}
}

// idle fails the test when the service's handler ran.
func (s *service) idle(t *testing.T) {
	t.Helper()
	select {
	case r := <-s.got:
		t.Fatalf("the handler ran: %+v", r)
	default:
	}
}

// serve starts a gRPC server with opts on a random loopback TCP port for the
// duration of the test and returns its address.
func serve(t *testing.T, svc *service, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(s, svc)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(lis) })
	t.Cleanup(func() { s.Stop(); wg.Wait() })
	return lis.Addr().String()
}

// dial returns a client of target, closed with the test; plaintext unless
// opts give credentials.
func dial(t *testing.T, target string, opts ...grpc.DialOption) testpb.TestServiceClient {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return testpb.NewTestServiceClient(conn)
}

func unary(t *testing.T, ctx context.Context, c testpb.TestServiceClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
}

// duplex sends n messages on one FullDuplexCall stream, reads n answers,
// closes its side and reads the rest.
func duplex(t *testing.T, ctx context.Context, c testpb.TestServiceClient, n int) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := c.FullDuplexCall(ctx)
	if err != nil {
		return err
	}
	for range n {
		if err := stream.Send(&testpb.StreamingOutputCallRequest{}); errors.Is(err, io.EOF) {
			_, err = stream.Recv() // the server ended the stream: its status
			return err
		} else if err != nil {
			return err
		}
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// bound is a gateway handler's context: a session, a member of the
// application's own, and a sampled span context.
func bound() context.Context {
	ctx := otelsession.Bind(context.Background(), testSession)
	app, _ := baggage.NewMemberRaw("app.tenant", "acme")
	b, _ := baggage.FromContext(ctx).SetMember(app)
	ctx = baggage.ContextWithBaggage(ctx, b)
	return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	}))
}

var testSession = otelsession.Session{
	Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100", UserID: "U1",
	ChatName: "Équipe, \"ops\"; 100% = done", UISessionID: "tab-1", Cwd: "/srv/work",
}

// wantSession is what a receiving handler must see of testSession: its
// remote fields.
func wantSession() map[otelsession.Field]string {
	m := sessionOf(otelsession.Bind(context.Background(), testSession))
	for f := range m {
		if f.Scope() == otelsession.Local {
			delete(m, f)
		}
	}
	return m
}

// pki is a certificate authority and the certificates made with it for one
// test: the server's, for 127.0.0.1, and clients' named by URI SANs.
type pki struct {
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	pool   *x509.CertPool
	server tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sessionwire test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{ca: ca, caKey: key, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.server = p.issue(t, 2, x509.ExtKeyUsageServerAuth, func(c *x509.Certificate) {
		c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		c.DNSNames = []string{"svc.internal"}
	})
	return p
}

func (p *pki) issue(t *testing.T, serial int64, usage x509.ExtKeyUsage, san func(*x509.Certificate)) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "sessionwire test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	san(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// client issues a client certificate whose only SAN is the URI name.
func (p *pki) client(t *testing.T, serial int64, name string) tls.Certificate {
	u, err := url.Parse(name)
	if err != nil {
		t.Fatal(err)
	}
	return p.issue(t, serial, x509.ExtKeyUsageClientAuth, func(c *x509.Certificate) { c.URIs = []*url.URL{u} })
}

// serverCreds verify a client certificate when one is given: a client
// without one still connects, and is judged by its address alone.
func (p *pki) serverCreds() grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool,
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13,
	}))
}

// clientCreds present cert when it is not nil.
func (p *pki) clientCreds(cert *tls.Certificate) grpc.DialOption {
	cfg := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}
