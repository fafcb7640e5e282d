package otelsession

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Origin is where a conversation's replies go: the routing part of a session
// and the span that started the work. Capture it with [OriginFrom] when a
// turn starts background work, store it with that work (it encodes to JSON),
// and give it to the router when the completion arrives, possibly in another
// process after a restart: the completion goes to the exact platform, chat,
// thread and message anchor it came from, and its span can link back to the
// originating one.
//
// An origin holds only identity fields ([ClassIdentity]): it is written to
// queues and stores, so it never holds a local field (the UI session id, the
// browser-control fields), which must not leave the process, nor display
// names, which routing never needs.
type Origin struct {
	Platform string `json:"platform"`
	ChatID   string `json:"chat_id"`
	// ChatType tells a direct message ("dm") from a group or channel. A
	// scoped platform's reply needs its tenant: a channel's is its ScopeID,
	// and a direct message, which has no scope (a Discord DM has no guild),
	// resolves it from its user binding, UserID.
	ChatType     string `json:"chat_type,omitempty"`
	ThreadID     string `json:"thread_id,omitempty"`
	ParentChatID string `json:"parent_chat_id,omitempty"`
	MessageID    string `json:"message_id,omitempty"` // the reply anchor
	ScopeID      string `json:"scope_id,omitempty"`   // guild / workspace / server
	UserID       string `json:"user_id,omitempty"`
	SessionKey   string `json:"session_key,omitempty"`
	// TraceParent and TraceState are the W3C trace context of the span that
	// was current when the origin was captured.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// ErrInvalidOrigin: a stored origin that cannot be routed.
var ErrInvalidOrigin = errors.New("invalid routing origin")

// OriginFrom captures the routing origin of the session bound in ctx, and its
// current span context. Unset and Cleared fields are "".
func OriginFrom(ctx context.Context) Origin {
	ctx = orBackground(ctx)
	get := func(f Field) string { v, _ := Lookup(ctx, f); return v }
	o := Origin{
		Platform: get(FieldPlatform), ChatID: get(FieldChatID), ChatType: get(FieldChatType), ThreadID: get(FieldThreadID),
		ParentChatID: get(FieldParentChatID), MessageID: get(FieldMessageID), ScopeID: get(FieldScopeID),
		UserID: get(FieldUserID), SessionKey: get(FieldSessionKey),
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		c := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
		o.TraceParent, o.TraceState = c.Get("traceparent"), c.Get("tracestate")
	}
	return o
}

// Validate reports why o cannot be routed: no platform or chat, a value Bind
// would refuse (alone, or all of them together being too large for the W3C
// baggage limits), or a trace context that does not parse. Errors name
// fields, never values.
func (o Origin) Validate() error {
	var errs []error
	if o.Platform == "" {
		errs = append(errs, fmt.Errorf("platform: missing"))
	}
	if o.ChatID == "" {
		errs = append(errs, fmt.Errorf("chat_id: missing"))
	}
	// Every value, and the whole, must be what o.Bind can bind.
	if err := o.session().Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.TraceParent != "" {
		if _, ok := o.SpanContext(); !ok {
			errs = append(errs, fmt.Errorf("traceparent: not a W3C trace context"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("otelsession: %w: %w", ErrInvalidOrigin, err)
	}
	return nil
}

// SpanContext returns the originating span context, remote, and whether o
// holds a valid one.
func (o Origin) SpanContext() (trace.SpanContext, bool) {
	if o.TraceParent == "" {
		return trace.SpanContext{}, false
	}
	c := propagation.MapCarrier{"traceparent": o.TraceParent}
	if o.TraceState != "" {
		c["tracestate"] = o.TraceState
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
	return sc, sc.IsValid()
}

// Link returns a span link to the originating span, for the span that
// delivers a completion after the originating request has ended: Jaeger then
// shows the completion beside the turn that promised it. It is the zero Link
// when o holds no valid span context.
func (o Origin) Link() trace.Link {
	sc, ok := o.SpanContext()
	if !ok {
		return trace.Link{}
	}
	return trace.Link{SpanContext: sc}
}

// Bind returns ctx with o's fields bound as a session (Set, or Cleared when
// empty), for the code that delivers a completion: what it logs and traces
// then carries the conversation it belongs to. Fields an origin does not hold
// are Cleared.
func (o Origin) Bind(ctx context.Context) context.Context {
	return Bind(ctx, o.session())
}

// session is the session o.Bind binds.
func (o Origin) session() Session {
	return Session{
		Platform: o.Platform, ChatID: o.ChatID, ChatType: o.ChatType, ThreadID: o.ThreadID, ParentChatID: o.ParentChatID,
		MessageID: o.MessageID, ScopeID: o.ScopeID, UserID: o.UserID, SessionKey: o.SessionKey,
	}
}

// UnmarshalJSON decodes a stored origin and validates it, so that a corrupted
// or forged record fails here, with a clear error, rather than at delivery.
func (o *Origin) UnmarshalJSON(data []byte) error {
	type plain Origin
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("otelsession: decode routing origin: %w", err)
	}
	if err := Origin(p).Validate(); err != nil {
		return err
	}
	*o = Origin(p)
	return nil
}
