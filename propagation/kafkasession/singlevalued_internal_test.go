package kafkasession

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// SingleValued must hold exactly when Values has one value at most for
// every key: the inbound policy then hides Values from the propagators.
func TestSingleValuedMatchesValues(t *testing.T) {
	h := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i+1 < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	for _, tc := range []struct {
		name string
		hs   []kgo.RecordHeader
		want bool
	}{
		{"none", nil, true},
		{"one value each", h("baggage", "a=1", "traceparent", "00-x", "message-id", "m"), true},
		{"a repeated key", h("baggage", "a=1", "baggage", "b=2"), false},
		{"two spellings", h("Baggage", "a=1", "BAGGAGE", "b=2"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewRecordCarrier(&kgo.Record{Headers: tc.hs}).SingleValued(); got != tc.want {
				t.Fatalf("SingleValued = %v, want %v", got, tc.want)
			}
			c := NewRecordCarrier(&kgo.Record{Headers: tc.hs})
			for _, key := range []string{"baggage", "Baggage", "traceparent", "message-id"} {
				if vs := c.Values(key); tc.want && (len(vs) > 1 || len(vs) == 1 && vs[0] != c.Get(key)) {
					t.Fatalf("Values(%q) = %q, Get = %q", key, vs, c.Get(key))
				}
			}
		})
	}
}
