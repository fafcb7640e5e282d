package sessionmetrics

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// reader collects what this package's tests count: the instruments are
// made once per process, from the meter provider set first.
var reader = func() *sdkmetric.ManualReader {
	r := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)))
	return r
}()

// counted returns the data points of the counter name, by their attributes
// ("key=value" sorted, without the sessionwire. prefix).
func counted(t *testing.T, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				var kv []string
				for _, a := range p.Attributes.ToSlice() {
					kv = append(kv, strings.TrimPrefix(string(a.Key), "sessionwire.")+"="+a.Value.String())
				}
				slices.Sort(kv)
				got[strings.Join(kv, " ")] = p.Value
			}
		}
	}
	return got
}

// since returns what after counted beyond before.
func since(before, after map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// Every carrier counted reaches the counter with its own attributes, the
// transports kept in outboundOpts and any other alike, each combination
// apart from the others.
func TestOutboundCountsEachCombinationApart(t *testing.T) {
	before := counted(t, OutboundName)
	transports := append(outboundTransports[:], "custom")
	want := map[string]int64{}
	for i, tr := range transports {
		for _, outcome := range []string{"sent", "withheld", "other"} {
			for _, signed := range []bool{false, true} {
				n := i + 1 // a count per transport; from the second call on, the cached list
				for range n {
					Outbound(tr, outcome, signed)
				}
				want[fmt.Sprintf("outcome=%s signed=%t transport=%s", outcome, signed, tr)] = int64(n)
			}
		}
	}
	got := since(before, counted(t, OutboundName))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counted\n%v\nwant\n%v", got, want)
	}
}

// Every inbound session counted reaches the counter with its own attributes,
// the outcomes kept in inboundOpts and the refusals alike.
func TestInboundCountsEachCombinationApart(t *testing.T) {
	before := counted(t, InboundName)
	transports := append(outboundTransports[:], "custom")
	want := map[string]int64{}
	for i, tr := range transports {
		for _, c := range [][2]string{{"accepted", ""}, {"untrusted", ""}, {"refused", "malformed"}, {"refused", "duplicate"}} {
			n := i + 1
			for range n {
				Inbound(tr, c[0], c[1])
			}
			want[fmt.Sprintf("outcome=%s reason=%s transport=%s", c[0], c[1], tr)] = int64(n)
		}
	}
	got := since(before, counted(t, InboundName))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counted\n%v\nwant\n%v", got, want)
	}
}

func BenchmarkInboundCount(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Inbound("http", "accepted", "")
	}
}

func BenchmarkOutboundCount(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Outbound("http", "sent", false)
	}
}
