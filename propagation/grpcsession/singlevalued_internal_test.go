package grpcsession

import (
	"context"
	"slices"
	"testing"

	otelprop "go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/metadata"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// SingleValued says yes only when Get reads exactly what Values would, for
// every key and spelling.
func TestSingleValuedMatchesValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		md   metadata.MD
		want bool
	}{
		{"empty", metadata.MD{}, true},
		{"one value each", metadata.MD{"baggage": {"a=1"}, "traceparent": {"00-x"}, ":authority": {"h:1"}}, true},
		{"two values", metadata.MD{"baggage": {"a=1"}, "x-multi": {"a", "b"}}, false},
		{"two spellings", metadata.MD{"Baggage": {"a=1"}, "BAGGAGE": {"b=2"}}, false},
		{"a key that folds into another", metadata.MD{"tracestate": {"s=1"}, "traceſtate": {"s=2"}}, false},
		{"one spelling, not lower-case", metadata.MD{"Baggage": {"a=1"}, "traceparent": {"00-x"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCallMD(tc.md)
			if got := c.SingleValued(); got != tc.want {
				t.Fatalf("SingleValued = %v, want %v", got, tc.want)
			}
			if !tc.want {
				return
			}
			for k := range tc.md {
				for _, key := range []string{k, "baggage", "BAGGAGE", "tracestate", "traceparent"} {
					if vs := c.Values(key); len(vs) > 1 || len(vs) == 1 && vs[0] != c.Get(key) {
						t.Fatalf("Values(%q) = %q, Get = %q", key, vs, c.Get(key))
					}
				}
			}
		})
	}
}

// The interceptor hides the metadata's Values method from the propagator
// only when every key has one value: a propagator of the composite that
// reads another key through Values still sees all of its values beside a
// single baggage line.
func TestServerKeepsValuesOfAMultiValuedKey(t *testing.T) {
	spy := &valuesSpy{}
	w3c := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}, spy)
	c := newConfig([]Option{WithPropagator(w3c), WithInbound(propagation.NewInbound(propagation.TrustAll))})
	for _, tc := range []struct {
		md   metadata.MD
		want []string
	}{
		{metadata.MD{"baggage": {"session.chat_id=C1"}, "x-multi": {"a", "b"}}, []string{"a", "b"}},
		{metadata.MD{"baggage": {"session.chat_id=C1"}, "x-multi": {"a"}}, []string{"a"}},
	} {
		*spy = valuesSpy{}
		out, err := c.serverContext(metadata.NewIncomingContext(context.Background(), tc.md), "/svc/M")
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := otelsession.Lookup(out, otelsession.FieldChatID); v != "C1" {
			t.Fatalf("%v: the session was not accepted: chat %q", tc.md, v)
		}
		got := spy.values
		if !spy.hadValues {
			got = []string{spy.get}
		}
		if !slices.Equal(got, tc.want) {
			t.Fatalf("%v: the propagator read x-multi as %q (through Values: %v), want %q", tc.md, got, spy.hadValues, tc.want)
		}
	}
}

// valuesSpy is a propagator that reads "x-multi" as a careful propagator
// would: through Values when the carrier has it.
type valuesSpy struct {
	hadValues bool
	values    []string
	get       string
}

func (s *valuesSpy) Extract(ctx context.Context, c otelprop.TextMapCarrier) context.Context {
	s.get = c.Get("x-multi")
	if vg, ok := c.(otelprop.ValuesGetter); ok {
		s.hadValues, s.values = true, vg.Values("x-multi")
	}
	return ctx
}
func (s *valuesSpy) Inject(context.Context, otelprop.TextMapCarrier) {}
func (s *valuesSpy) Fields() []string                                { return []string{"x-multi"} }
