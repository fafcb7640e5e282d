package otelsession_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sessionwire/sessionwire/otelsession"
)

// A nil context reads as an empty one, as Bind, Clear and Reset take it:
// no reader panics on it.
func TestReadersTakeANilContext(t *testing.T) {
	var none context.Context
	_, st := otelsession.Lookup(none, otelsession.FieldChatID)
	assert.Equal(t, otelsession.Unset, st)
	assert.Equal(t, "def", otelsession.Getenv(none, "HERMES_SESSION_NOT_A_VARIABLE_X", "def"))
	assert.Equal(t, otelsession.Session{}, otelsession.FromContext(none))
	assert.Empty(t, otelsession.Cwd(none))
	assert.False(t, otelsession.IsDelegatedChild(none))
	assert.True(t, otelsession.AsyncDeliverySupported(none))
	assert.Equal(t, otelsession.Origin{}, otelsession.OriginFrom(none))
	bound := otelsession.Bind(none, otelsession.Session{Platform: "telegram", ChatID: "42"})
	assert.Equal(t, "42", otelsession.Getenv(bound, "HERMES_SESSION_CHAT_ID", ""))
}
