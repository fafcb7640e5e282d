package otelsession_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwire/sessionwire/otelsession"
)

const engagedProbeEnv = "OTELSESSION_ENGAGED_PROBE"

// runEngagedProbe runs in a fresh process, where nothing has latched yet, and
// prints the latch after each step.
func runEngagedProbe() {
	ctx := context.Background()
	steps := []string{fmt.Sprint(otelsession.Engaged())}
	ctx = otelsession.DeclareStatelessChannel(ctx)
	ctx = otelsession.With(ctx, otelsession.FieldChatID, "c")
	ctx = otelsession.WithSessionID(otelsession.Reset(otelsession.Clear(ctx)), "id")
	steps = append(steps, fmt.Sprint(otelsession.Engaged()))
	ctx = otelsession.Bind(ctx, otelsession.Session{})
	steps = append(steps, fmt.Sprint(otelsession.Engaged()))
	otelsession.Reset(otelsession.Clear(ctx))
	steps = append(steps, fmt.Sprint(otelsession.Engaged()))
	fmt.Println(strings.Join(steps, " "))
}

// The latch is process-wide, so it is observed in a child process that starts
// with nothing bound.
func TestEngaged(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), engagedProbeEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Equal(t, "false false true true", strings.TrimSpace(string(out)),
		"start, after DeclareStatelessChannel/With/WithSessionID/Clear/Reset, after Bind, after Clear+Reset")
}
