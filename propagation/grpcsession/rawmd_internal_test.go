package grpcsession

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/metadata"
)

// judgedOnly reads the incoming metadata without copying it; should a grpc
// release store it otherwise, incomingKey is nil and every call without a
// session pays for a copy again. This fails first.
func TestJudgedOnlyReadsTheIncomingMetadata(t *testing.T) {
	if incomingKey == nil {
		t.Fatal("the incoming metadata's context key was not learnt: every call without a session copies its metadata")
	}
	lines := []string{"app.tenant=acme"}
	for _, c := range []struct {
		name string
		md   metadata.MD
		want bool
	}{
		{"the judged lines alone", metadata.MD{"baggage": {"app.tenant=acme"}, "content-type": {"application/grpc"}}, true},
		{"no baggage left to read", metadata.MD{"content-type": {"application/grpc"}}, true},
		{"other lines", metadata.MD{"baggage": {"session.chat_id=c"}}, false},
		{"a line more", metadata.MD{"baggage": {"app.tenant=acme", "session.chat_id=c"}}, false},
		{"a second spelling", metadata.MD{"baggage": {"app.tenant=acme"}, "Baggage": {"session.chat_id=c"}}, false},
		{"another spelling alone", metadata.MD{"BAGGAGE": {"app.tenant=acme"}}, false},
	} {
		ctx := metadata.NewIncomingContext(context.Background(), c.md)
		if got := judgedOnly(ctx, lines); got != c.want {
			t.Errorf("%s: judgedOnly = %v, want %v", c.name, got, c.want)
		}
	}
	if judgedOnly(context.Background(), lines) {
		t.Error("a context whose metadata cannot be read was taken for one that holds the judged lines")
	}
}

// baggageOf finds, in one pass, the lines under "baggage" and any baggage
// entry the Edge's propagator leaves to the interceptor: another spelling,
// or baggage-bin in any spelling.
func TestBaggageOf(t *testing.T) {
	for _, c := range []struct {
		name  string
		md    metadata.MD
		lines []string
		other bool
	}{
		{"none", metadata.MD{"content-type": {"application/grpc"}}, nil, false},
		{"one line", metadata.MD{"baggage": {"a=1"}, "traceparent": {"00-x"}}, []string{"a=1"}, false},
		{"two lines", metadata.MD{"baggage": {"a=1", "b=2"}}, []string{"a=1", "b=2"}, false},
		{"another spelling beside", metadata.MD{"baggage": {"a=1"}, "Baggage": {"session.chat_id=c"}}, []string{"a=1"}, true},
		{"another spelling alone", metadata.MD{"BAGGAGE": {"a=1"}}, nil, true},
		{"a binary entry", metadata.MD{"baggage": {"a=1"}, "baggage-bin": {"x"}}, []string{"a=1"}, true},
		{"a binary entry spelled otherwise", metadata.MD{"Baggage-Bin": {"x"}}, nil, true},
		{"a key of the same length", metadata.MD{"baggagx": {"x"}, "baggage-biX": {"x"}}, nil, false},
	} {
		lines, other := baggageOf(c.md)
		if !slices.Equal(lines, c.lines) || other != c.other {
			t.Errorf("%s: baggageOf = %q, %v; want %q, %v", c.name, lines, other, c.lines, c.other)
		}
	}
}

// A verdict takes the metadata it read lines from as judged, and reads any
// other map its interceptor finds, as a stats handler after otelgrpc's may
// have put in the context.
func TestVerdictJudgedOnlyReadsAReplacedMap(t *testing.T) {
	md := metadata.MD{"baggage": {"app.tenant=acme"}}
	ctx := metadata.NewIncomingContext(context.Background(), md)
	got, ok := incomingMD(ctx)
	if !ok || !sameMD(got, md) {
		t.Fatal("incomingMD did not return the context's own map")
	}
	v := &verdict{lines: md["baggage"], md: got}
	if !v.judgedOnly(ctx) {
		t.Error("the map the lines were read from was not taken as judged")
	}
	replaced := metadata.NewIncomingContext(ctx, metadata.MD{"baggage": {"app.tenant=acme"}, "Baggage": {"session.chat_id=c"}})
	if v.judgedOnly(replaced) {
		t.Error("a replaced map holding another spelling was taken as judged")
	}
	same := metadata.NewIncomingContext(ctx, metadata.MD{"baggage": {"app.tenant=acme"}})
	if !v.judgedOnly(same) {
		t.Error("a replaced map holding the judged lines alone was not taken as judged")
	}
}
