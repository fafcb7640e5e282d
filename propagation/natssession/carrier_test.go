package natssession_test

import (
	"context"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

func TestHeaderCarrierReads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header nats.Header
		key    string
		get    string
		values []string
	}{
		{"exact key", nats.Header{"baggage": {"a=1", "b=2"}}, "baggage", "a=1", []string{"a=1", "b=2"}},
		{"canonical key when the exact one is absent", nats.Header{"Baggage": {"a=1"}}, "baggage", "a=1", []string{"a=1"}},
		{"upper-case key", nats.Header{"TRACEPARENT": {"00-x"}}, "traceparent", "00-x", []string{"00-x"}},
		{"exact key wins over other spellings", nats.Header{"Baggage": {"forged=1"}, "baggage": {"a=1"}}, "baggage", "a=1", []string{"a=1"}},
		{"several spellings, no exact: all, in key order", nats.Header{"bAGGAGE": {"c=3"}, "Baggage": {"a=1"}, "BAGGAGE": {"b=2"}}, "baggage", "b=2", []string{"b=2", "a=1", "c=3"}},
		{"missing key", nats.Header{"other": {"x"}}, "baggage", "", nil},
		{"exact key with no values", nats.Header{"baggage": {}}, "baggage", "", []string{}},
		{"nil header", nil, "baggage", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := natssession.HeaderCarrier(tc.header)
			if got := c.Get(tc.key); got != tc.get {
				t.Errorf("Get(%q) = %q, want %q", tc.key, got, tc.get)
			}
			if got := c.Values(tc.key); !slices.Equal(got, tc.values) {
				t.Errorf("Values(%q) = %q, want %q", tc.key, got, tc.values)
			}
		})
	}
}

func TestHeaderCarrierSetReplacesEverySpelling(t *testing.T) {
	t.Parallel()
	h := nats.Header{"Baggage": {"stale=1"}, "BAGGAGE": {"stale=2"}, "baggage": {"old=1", "old=2"}, "Other": {"kept"}}
	c := natssession.HeaderCarrier(h)
	c.Set("baggage", "new=1")
	want := nats.Header{"baggage": {"new=1"}, "Other": {"kept"}}
	if len(h) != len(want) || !slices.Equal(h["baggage"], want["baggage"]) || !slices.Equal(h["Other"], want["Other"]) {
		t.Errorf("after Set: %v, want %v", h, want)
	}
	keys := c.Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"Other", "baggage"}) {
		t.Errorf("Keys() = %v", keys)
	}

	var nilCarrier natssession.HeaderCarrier
	nilCarrier.Set("baggage", "x") // must not panic
	if len(nilCarrier.Keys()) != 0 {
		t.Error("nil carrier has keys")
	}
}

// Inject allocates headers and writes exact lower-case keys.
func TestInjectWritesExactKeys(t *testing.T) {
	t.Parallel()
	tp, _ := newTracing(t)
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp), natssession.WithOutbound(toQueue))
	msg := &nats.Msg{Subject: "chat.in"}
	ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "42"})
	_, span := pub.Inject(ctx, msg)
	span.End()
	keys := natssession.HeaderCarrier(msg.Header).Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"baggage", "traceparent"}) {
		t.Errorf("header keys %v, want [baggage traceparent]", keys)
	}
}
