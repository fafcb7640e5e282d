package natssession

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// SingleValued must hold exactly when Values has one value at most for
// every key: the inbound policy then hides Values from the propagators.
func TestSingleValuedMatchesValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    nats.Header
		want bool
	}{
		{"empty", nats.Header{}, true},
		{"one value each", nats.Header{"baggage": {"a=1"}, "traceparent": {"00-x"}, "Nats-Msg-Id": {"m"}}, true},
		{"two values", nats.Header{"baggage": {"a=1", "b=2"}}, false},
		{"two spellings", nats.Header{"Baggage": {"a=1"}, "BAGGAGE": {"b=2"}}, false},
		{"an exact key beside another spelling", nats.Header{"baggage": {"a=1"}, "Baggage": {"b=2"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HeaderCarrier(tc.h).SingleValued(); got != tc.want {
				t.Fatalf("SingleValued = %v, want %v", got, tc.want)
			}
			if !tc.want {
				return
			}
			c := HeaderCarrier(tc.h)
			for k := range tc.h {
				for _, key := range []string{k, "baggage", "BAGGAGE", "traceparent"} {
					if vs := c.Values(key); len(vs) > 1 || len(vs) == 1 && vs[0] != c.Get(key) {
						t.Fatalf("Values(%q) = %q, Get = %q", key, vs, c.Get(key))
					}
				}
			}
		})
	}
}
