package otelsession_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
)

func TestOriginRoundTrip(t *testing.T) {
	t.Parallel()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	ctx = otelsession.Bind(ctx, fullSession())

	o := otelsession.OriginFrom(ctx)
	require.NoError(t, o.Validate())
	assert.Equal(t, "telegram", o.Platform)
	assert.Equal(t, "17585", o.ThreadID)
	assert.Equal(t, "88121", o.MessageID)
	assert.Equal(t, "guild-998877", o.ScopeID)
	assert.Equal(t, "group", o.ChatType, "a direct message is told from a channel by it")

	data, err := json.Marshal(o)
	require.NoError(t, err)
	// A stored origin leaves the process (queues, key-value stores): no local
	// field may be in it.
	assert.NotContains(t, string(data), "tab-7", "the UI session id is local")
	assert.NotContains(t, string(data), "ui_session_id")
	var back otelsession.Origin
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, o, back)

	link := back.Link()
	assert.Equal(t, sc.TraceID(), link.SpanContext.TraceID())
	assert.Equal(t, sc.SpanID(), link.SpanContext.SpanID())
	assert.True(t, link.SpanContext.IsRemote())

	bound := back.Bind(context.Background())
	assert.Equal(t, "17585", otelsession.Getenv(bound, "HERMES_SESSION_THREAD_ID", ""))
	assert.Equal(t, "", otelsession.Getenv(bound, "HERMES_SESSION_PROFILE", "def"), "what an origin does not hold is Cleared")
}

func TestOriginWithoutSpan(t *testing.T) {
	t.Parallel()
	o := otelsession.OriginFrom(otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C1"}))
	assert.Empty(t, o.TraceParent)
	assert.False(t, o.Link().SpanContext.IsValid())
	require.NoError(t, o.Validate())
}

func TestOriginRefusesBadRecords(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"not JSON":          `{"platform":`,
		"no chat":           `{"platform":"telegram"}`,
		"no platform":       `{"chat_id":"1"}`,
		"NUL in a thread":   `{"platform":"telegram","chat_id":"1","thread_id":"a\u0000b"}`,
		"bad traceparent":   `{"platform":"telegram","chat_id":"1","traceparent":"00-zz-01"}`,
		"wrong type":        `{"platform":7,"chat_id":"1"}`,
		"value too long":    `{"platform":"telegram","chat_id":"` + strings.Repeat("x", 600) + `"}`,
		"invalid traceflag": `{"platform":"telegram","chat_id":"1","traceparent":"00-00000000000000000000000000000000-0000000000000000-01"}`,
	}
	for name, record := range tests {
		t.Run(name, func(t *testing.T) {
			var o otelsession.Origin
			err := json.Unmarshal([]byte(record), &o)
			require.Error(t, err)
			if name != "not JSON" { // a syntax error is caught by encoding/json before the type sees it
				assert.Contains(t, err.Error(), "routing origin")
			}
			assert.Equal(t, otelsession.Origin{}, o, "nothing is half-decoded")
		})
	}
}
