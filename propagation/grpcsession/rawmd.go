package grpcsession

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/sessionwire/sessionwire/internal/ctxprobe"
)

// incomingKey is the context key under which grpc's metadata package keeps
// a call's incoming metadata as given to metadata.NewIncomingContext. The
// package exports no way to read that map without copying it whole
// (FromIncomingContext copies every key and value), so the key is learnt
// once, from the context ValueFromIncomingContext asks, and kept only if
// the value it then finds is the very map NewIncomingContext was given.
// Otherwise it is nil and every read copies, as without it.
var incomingKey = func() any {
	key := ctxprobe.Key(func(ctx context.Context) { _ = metadata.ValueFromIncomingContext(ctx, "k") })
	if key == nil {
		return nil
	}
	md := metadata.MD{"K": {"v"}}
	got, ok := metadata.NewIncomingContext(context.Background(), md).Value(key).(metadata.MD)
	if !ok || len(got) != 1 || len(got["K"]) != 1 || &got["K"][0] != &md["K"][0] {
		return nil
	}
	return key
}()

// judgedOnly reports whether every baggage entry a handler could read from
// ctx's incoming metadata, whatever the spelling of its key, holds exactly
// lines, the baggage lines the policy judged: one key, spelled "baggage",
// whose values are lines. It is false when it cannot tell (the metadata
// cannot be read without a copy). It reads the metadata without copying it.
func judgedOnly(ctx context.Context, lines []string) bool {
	if incomingKey == nil {
		return false
	}
	md, ok := ctx.Value(incomingKey).(metadata.MD)
	if !ok {
		return false
	}
	for k, vs := range md {
		if len(k) == len(baggageKey) && strings.EqualFold(k, baggageKey) && (k != baggageKey || !slices.Equal(vs, lines)) {
			return false
		}
	}
	return true
}
