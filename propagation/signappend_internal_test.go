package propagation

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/otelsession"
)

// The key OpenTelemetry keeps baggage under is found, so a signed context is
// built only when read. Should a later OpenTelemetry hide it differently,
// this fails: withSignature then builds every signed context at once,
// correct but slower.
func TestBaggageKeyIsFound(t *testing.T) {
	if baggageKey == nil {
		t.Fatal("the baggage context key was not found: signed contexts are built eagerly")
	}
}

// A context returned with its signature built on first read is, to every
// reader, the context with the signature added: the baggage, every other
// value, the deadline and cancellation, under concurrent readers, and
// below contexts derived from it.
func TestSignedContextIsTheSignedContext(t *testing.T) {
	type otherKey struct{}
	for _, lazy := range []bool{true, false} {
		name := "built on first read"
		if !lazy {
			name = "built at once"
		}
		t.Run(name, func(t *testing.T) {
			if !lazy {
				saved := baggageKey
				baggageKey = nil
				t.Cleanup(func() { baggageKey = saved })
			}
			parent, cancel := context.WithTimeout(context.WithValue(context.Background(), otherKey{}, "kept"), time.Hour)
			out := otelsession.Bind(parent, otelsession.Session{Platform: "slack", ChatID: "C1"})
			const sig = "v1.k1.1767225600.9ZeWs6nIMMRAFiEkyRLUhik2F2YBBWqvGeEaiBnyHlo"
			ctx := withSignature(out, sig)
			child := context.WithValue(ctx, otherKey{}, "child")

			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if got := baggage.FromContext(ctx).Member(otelsession.SignatureKey).Value(); got != sig {
						t.Errorf("signature %q", got)
					}
				})
			}
			wg.Wait()
			b := baggage.FromContext(child)
			if b.Len() != baggage.FromContext(out).Len()+1 || b.Member(otelsession.SignatureKey).Value() != sig {
				t.Errorf("a derived context's baggage: %v", b)
			}
			if v, _ := otelsession.Lookup(child, otelsession.FieldChatID); v != "C1" {
				t.Errorf("chat id %q", v)
			}
			if ctx.Value(otherKey{}) != "kept" || child.Value(otherKey{}) != "child" {
				t.Error("other values are not the parent's")
			}
			if d, ok := ctx.Deadline(); !ok || d.IsZero() {
				t.Error("no deadline")
			}
			cancel()
			<-child.Done()
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("Err = %v", ctx.Err())
			}
		})
	}
}
