package grpcsession

import (
	"context"
	"reflect"
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
	md, ok := incomingMD(ctx)
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

// incomingMD returns ctx's incoming metadata as the context holds it, the
// very map given to metadata.NewIncomingContext, without copying it. It is
// false when the context holds none or the map cannot be read so
// (incomingKey is nil). What it returns is read, never written: gRPC and
// every reader through its metadata package share it.
func incomingMD(ctx context.Context) (metadata.MD, bool) {
	if incomingKey == nil {
		return nil, false
	}
	md, ok := ctx.Value(incomingKey).(metadata.MD)
	return md, ok
}

// baggageOf reads md's baggage entries in one pass over its keys: the
// values of the key spelled "baggage" (md's own slice), and whether md holds
// any other baggage entry: "baggage" spelled otherwise, or "baggage-bin" in
// any spelling. When other is false, lines are all the baggage a handler
// could read from md, under any spelling.
func baggageOf(md metadata.MD) (lines []string, other bool) {
	for k, vs := range md {
		switch {
		case k == baggageKey:
			lines = vs
		case len(k) == len(baggageKey) && strings.EqualFold(k, baggageKey),
			len(k) == len(baggageBinKey) && strings.EqualFold(k, baggageBinKey):
			other = true
		}
	}
	return lines, other
}

// sameMD reports whether a and b are one map.
func sameMD(a, b metadata.MD) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
