package ctxprobe

import (
	"context"
	"testing"
)

type key struct{}

type uncomparable struct{ _ []int }

func TestKey(t *testing.T) {
	if got := Key(func(ctx context.Context) { _ = ctx.Value(key{}) }); got != (key{}) {
		t.Errorf("one key asked: got %v", got)
	}
	for name, ask := range map[string]func(context.Context){
		"none":         func(context.Context) {},
		"two":          func(ctx context.Context) { _, _ = ctx.Value(key{}), ctx.Value("other") },
		"uncomparable": func(ctx context.Context) { _ = ctx.Value(uncomparable{}) },
	} {
		if got := Key(ask); got != nil {
			t.Errorf("%s: got %v, want nil", name, got)
		}
	}
}
