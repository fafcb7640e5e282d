package grpcsession

import (
	"context"
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
