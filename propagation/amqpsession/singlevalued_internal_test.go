package amqpsession

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// SingleValued must hold exactly when Values has one value at most for
// every key: the inbound policy then hides Values from the propagators.
func TestSingleValuedMatchesValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    amqp.Table
		want bool
	}{
		{"empty", amqp.Table{}, true},
		{"one value each", amqp.Table{"baggage": "a=1", "traceparent": "00-x", "x-count": int32(3)}, true},
		{"an array", amqp.Table{"baggage": []any{"a=1", "b=2"}}, false},
		{"two spellings", amqp.Table{"Baggage": "a=1", "BAGGAGE": "b=2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TableCarrier(tc.t).SingleValued(); got != tc.want {
				t.Fatalf("SingleValued = %v, want %v", got, tc.want)
			}
			c := TableCarrier(tc.t)
			for _, key := range []string{"baggage", "Baggage", "traceparent", "x-count"} {
				if vs := c.Values(key); tc.want && (len(vs) > 1 || len(vs) == 1 && vs[0] != c.Get(key)) {
					t.Fatalf("Values(%q) = %q, Get = %q", key, vs, c.Get(key))
				}
			}
		})
	}
}
