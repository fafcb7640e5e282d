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

// Every carrier counted reaches the counter with its own attributes, the
// transports kept in outboundOpts and any other alike, each combination
// apart from the others.
func TestOutboundCountsEachCombinationApart(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
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
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != OutboundName {
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
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counted\n%v\nwant\n%v", got, want)
	}
}

func BenchmarkOutboundCount(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Outbound("http", "sent", false)
	}
}
