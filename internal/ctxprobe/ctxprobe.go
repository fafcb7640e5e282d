package ctxprobe

import (
	"context"
	"reflect"
)

// Key returns the one key ask looks up in the context it is given: nil when
// ask looks up no key, more than one, or one that cannot be compared (a
// context compares keys with ==).
func Key(ask func(ctx context.Context)) any {
	p := &probe{Context: context.Background()}
	ask(p)
	if len(p.keys) != 1 || p.keys[0] == nil || !reflect.TypeOf(p.keys[0]).Comparable() {
		return nil
	}
	return p.keys[0]
}

// probe is a context that records the keys it is asked for and holds none.
type probe struct {
	context.Context
	keys []any
}

func (p *probe) Value(key any) any {
	p.keys = append(p.keys, key)
	return nil
}
