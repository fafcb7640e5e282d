package sessiontrace

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	sdklog "go.opentelemetry.io/otel/sdk/log"
)

// LogProcessor adds the session of the emitting context to OpenTelemetry log
// records (the OTel logs SDK, go.opentelemetry.io/otel/sdk/log), redacted like
// spans. Register it before the exporting processor, which then sees the
// attributes: sdklog.NewLoggerProvider(sdklog.WithProcessor(p),
// sdklog.WithProcessor(sdklog.NewBatchProcessor(exp))). The SDK itself puts the
// trace and span ids on every record.
type LogProcessor struct {
	r *redactor
}

var _ sdklog.Processor = (*LogProcessor)(nil)

// NewLogProcessor returns a processor applying r (the zero Redaction gives
// the defaults).
func NewLogProcessor(r Redaction) *LogProcessor { return &LogProcessor{r: newRedactor(r, nil)} }

// Enabled reports true: the processor adds attributes and filters nothing.
func (*LogProcessor) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }

// OnEmit adds the session attributes to record.
func (p *LogProcessor) OnEmit(ctx context.Context, record *sdklog.Record) error {
	if ctx == nil || record == nil {
		return nil
	}
	var buf [24]attribute.KeyValue
	if attrs := p.r.attributes(ctx, nil, buf[:0]); len(attrs) > 0 {
		record.AddAttributes(attrs...)
	}
	return nil
}

// Shutdown does nothing.
func (*LogProcessor) Shutdown(context.Context) error { return nil }

// ForceFlush does nothing.
func (*LogProcessor) ForceFlush(context.Context) error { return nil }
