package otelsession_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sessionwire/sessionwire/otelsession"
)

// Not parallel: it asserts on what reaches otel.Handle.
func TestWithCwd(t *testing.T) {
	reported.take()
	ctx := otelsession.With(context.Background(), otelsession.FieldThreadID, "t")
	ctx = otelsession.WithCwd(ctx, "/srv/work")
	assert.Equal(t, "/srv/work", otelsession.Cwd(ctx))
	v, st := otelsession.Lookup(ctx, otelsession.FieldThreadID)
	assert.Equal(t, "t", v, "fields are left as they are")
	assert.Equal(t, otelsession.Set, st)
	_, st = otelsession.Lookup(ctx, otelsession.FieldChatID)
	assert.Equal(t, otelsession.Unset, st, "an unset field stays unset")

	long := "/" + strings.Repeat("d", 1000)
	assert.Equal(t, long, otelsession.Cwd(otelsession.WithCwd(ctx, long)), "a path may be longer than an identifier")
	refused := otelsession.WithCwd(ctx, "/"+strings.Repeat("d", 4096))
	assert.Equal(t, "", otelsession.Cwd(refused))
	assert.True(t, reported.has(otelsession.ErrValueTooLong))
	assert.Equal(t, "", otelsession.Cwd(otelsession.WithCwd(ctx, "")))
}
