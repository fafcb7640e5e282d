package sessiontest

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sessionwire/sessionwire/propagation"
)

var (
	metricsOnce   sync.Once
	metricsReader *sdkmetric.ManualReader
)

// Metrics installs, once per test binary, an SDK meter provider as the
// global one (where internal/sessionmetrics records), and returns the sums
// of every counter so far, keyed "name attr=value attr=value" with the
// attributes in sorted order. Other tests of the binary count too: compare
// a count before and after, or ask for at least what a test did.
func Metrics(t testing.TB) map[string]int64 {
	t.Helper()
	metricsOnce.Do(func() {
		metricsReader = sdkmetric.NewManualReader()
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metricsReader)))
	})
	var rm metricdata.ResourceMetrics
	if err := metricsReader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	return CounterSums(rm)
}

// CounterSums sums every int64 counter of rm, keyed "name attr=value
// attr=value" with the attributes in sorted order.
func CounterSums(rm metricdata.ResourceMetrics) map[string]int64 {
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				key := m.Name
				for _, kv := range dp.Attributes.ToSlice() {
					key += " " + string(kv.Key) + "=" + kv.Value.String()
				}
				got[key] += dp.Value
			}
		}
	}
	return got
}

// MetricsGrew fails t unless every counter of want grew by at least its
// count since before (a snapshot of Metrics).
func MetricsGrew(t testing.TB, before map[string]int64, want map[string]int64) {
	t.Helper()
	after := Metrics(t)
	for key, n := range want {
		if d := after[key] - before[key]; d < n {
			t.Errorf("%s grew by %d, want at least %d", key, d, n)
		}
	}
}

// InboundErrors are the errors an inbound policy with a verifier may wrap:
// a fuzzed carrier's refusal must wrap one of them.
var InboundErrors = []error{propagation.ErrBaggageTooLarge, propagation.ErrMalformedMember,
	propagation.ErrDuplicateMember, propagation.ErrInvalidValue, propagation.ErrLocalField,
	propagation.ErrUnknownSessionKey, propagation.ErrBadSignature, propagation.ErrSignatureExpired,
	propagation.ErrUnknownKey}
