package grpcsession

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

// TestCallMDAnswersAsMetadataCarrier: the interceptors' carrier takes a
// short cut while the metadata's keys are lower-case ASCII; it must give
// MetadataCarrier's answers for every key in every state of the map,
// including after a write that ends the short cut.
func TestCallMDAnswersAsMetadataCarrier(t *testing.T) {
	keys := []string{"baggage", "Baggage", "BAGGAGE", "baggage-bin", "traceparent", "tracestate",
		"TraceState", "traceſtate", "\u212a", "k", "x-other", ":authority", ""}
	maps := map[string]func() metadata.MD{
		"lower-case": func() metadata.MD {
			return metadata.MD{"baggage": {"a=1", "b=2"}, "traceparent": {"00-x"}, ":authority": {"h:1"}}
		},
		"mixed spellings": func() metadata.MD {
			return metadata.MD{"baggage": {"a=1"}, "Baggage": {"b=2"}, "traceparent": {"00-x"}}
		},
		"a key that folds to ASCII": func() metadata.MD {
			return metadata.MD{"traceſtate": {"s=1"}, "k": {"v"}, "\u212a": {"kelvin"}}
		},
		"empty": func() metadata.MD { return metadata.MD{} },
	}
	writes := [][2]string{{"", ""}, {"tracestate", "t=1"}, {"traceſtate", "t=2"}, {"BAGGAGE", "c=3"}}
	for name, build := range maps {
		for _, w := range writes {
			for _, del := range append([]string{""}, keys...) {
				want, got := build(), build()
				c := newCallMD(got)
				if w[0] != "" {
					MetadataCarrier(want).Set(w[0], w[1])
					c.Set(w[0], w[1])
				}
				if del != "" {
					MetadataCarrier(want).Delete(del)
					c.Delete(del)
				}
				for _, k := range keys {
					wv, gv := MetadataCarrier(want).Values(k), c.Values(k)
					slices.Sort(wv[min(1, len(wv)):]) // other spellings come in map order
					slices.Sort(gv[min(1, len(gv)):])
					if !slices.Equal(wv, gv) {
						t.Errorf("%s, set %q, delete %q: Values(%q) = %q, MetadataCarrier says %q", name, w[0], del, k, gv, wv)
					}
					if g := c.Get(k); (g == "") != (MetadataCarrier(want).Get(k) == "") || len(want[strings.ToLower(k)]) > 0 && g != want[strings.ToLower(k)][0] {
						t.Errorf("%s, set %q, delete %q: Get(%q) = %q, MetadataCarrier says %q", name, w[0], del, k, g, MetadataCarrier(want).Get(k))
					}
				}
				wk, gk := MetadataCarrier(want).Keys(), c.Keys()
				slices.Sort(wk)
				slices.Sort(gk)
				if !slices.Equal(wk, gk) {
					t.Errorf("%s, set %q, delete %q: keys %q, MetadataCarrier has %q", name, w[0], del, gk, wk)
				}
			}
		}
	}
}
