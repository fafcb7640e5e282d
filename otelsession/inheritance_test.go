package otelsession_test

// Ports of the original gateway's leak guards (tests/gateway/
// test_session_context_inheritance.py and tests/tools/
// test_local_env_session_leak.py), in Go terms: a new unit of work derives its
// context from whichever context created it, and what a child process spawned
// "right now" would see is decided by fallback.ChildEnviron from the context.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/otelsession"
)

var (
	mine = otelsession.Session{
		SessionKey: "agent:main:discord:thread:MINE:MINE", Platform: "discord", ChatID: "MINE_CHAT",
		ThreadID: "MINE_THREAD", UserID: "MINE_USER", ChatName: "mine", MessageID: "MINE_MSG",
	}
	foreign = otelsession.Session{
		SessionKey: "agent:main:discord:thread:FOREIGN:FOREIGN", Platform: "discord", ChatID: "FOREIGN_CHAT",
		ThreadID: "FOREIGN_THREAD", UserID: "FOREIGN_USER", ChatName: "foreign", MessageID: "FOREIGN_MSG",
	}
)

// spawnView is what a child process spawned from ctx would see for a few
// session variables ("" and absent are told apart), given the environment it
// would otherwise inherit.
func spawnView(ctx context.Context, inherited []string, engaged bool) map[string]string {
	var vars []fallback.Var
	for _, f := range otelsession.Fields() {
		v, st := otelsession.Lookup(ctx, f)
		vars = append(vars, fallback.Var{Name: f.Name(), Bound: st != otelsession.Unset, Value: v})
	}
	view := map[string]string{}
	for _, kv := range fallback.ChildEnviron(inherited, vars, engaged) {
		name, value, _ := strings.Cut(kv, "=")
		switch name {
		case "HERMES_SESSION_CHAT_ID", "HERMES_SESSION_THREAD_ID", "HERMES_SESSION_KEY", "HERMES_SESSION_MESSAGE_ID":
			view[name] = value
		}
	}
	return view
}

func viewOf(s otelsession.Session) map[string]string {
	return map[string]string{
		"HERMES_SESSION_CHAT_ID": s.ChatID, "HERMES_SESSION_THREAD_ID": s.ThreadID,
		"HERMES_SESSION_KEY": s.SessionKey, "HERMES_SESSION_MESSAGE_ID": s.MessageID,
	}
}

// The os.environ mirror holds whichever session wrote it last.
var staleGlobal = []string{
	"PATH=/usr/bin",
	"HERMES_SESSION_KEY=agent:main:discord:thread:FOREIGN_CONCURRENT:FOREIGN_CONCURRENT",
	"HERMES_SESSION_THREAD_ID=stale-thread-from-prior-turn",
}

// Message B's work is created from a context in which message A already bound
// its session. Without a Reset, B's pre-bind window would spawn children as A;
// with it, the window strips, and B's own Bind then takes effect.
func TestInheritedSessionLeaksOnlyWithoutReset(t *testing.T) {
	t.Parallel()
	ctxA := otelsession.Bind(context.Background(), mine)
	type captured struct{ window, bound map[string]string }
	run := func(resetFirst bool) captured {
		ch := make(chan captured)
		go func(ctx context.Context) { // B's task, created from A's context
			if resetFirst {
				ctx = otelsession.Reset(ctx)
			}
			var c captured
			c.window = spawnView(ctx, staleGlobal, true)
			c.bound = spawnView(otelsession.Bind(ctx, foreign), staleGlobal, true)
			ch <- c
		}(ctxA)
		return <-ch
	}

	leaky := run(false)
	assert.Equal(t, viewOf(mine), leaky.window, "reproducer: without Reset the window sees A's identity")

	fixed := run(true)
	assert.Empty(t, fixed.window, "after Reset an engaged process strips every session variable, foreign globals too")
	assert.Equal(t, viewOf(foreign), fixed.bound, "B's own session binds normally after the reset window")
}

func TestStatelessSiblingLeaksOnlyWithoutReset(t *testing.T) {
	t.Parallel()
	ctxA := otelsession.Bind(context.Background(), otelsession.Session{Platform: "api_server", Stateless: true})
	assert.False(t, otelsession.AsyncDeliverySupported(ctxA), "reproducer: the inherited capability says no")
	assert.True(t, otelsession.AsyncDeliverySupported(otelsession.Reset(ctxA)), "the fix: back to default-supported")
}

func TestSpawnViewFromEnvironmentMirror(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ctx     context.Context
		engaged bool
		want    map[string]string
	}{
		{"engaged, nothing bound: the foreign global is stripped", context.Background(), true, map[string]string{}},
		{"not engaged, nothing bound: a one-shot program keeps its fallback", context.Background(), false, map[string]string{
			"HERMES_SESSION_KEY":       "agent:main:discord:thread:FOREIGN_CONCURRENT:FOREIGN_CONCURRENT",
			"HERMES_SESSION_THREAD_ID": "stale-thread-from-prior-turn",
		}},
		{"bound key wins over the foreign global", otelsession.Bind(context.Background(), otelsession.Session{
			SessionKey: "agent:main:discord:group:MY_BUGS_ROOT:111", Platform: "discord", ChatID: "MY_BUGS_ROOT",
		}), true, map[string]string{
			"HERMES_SESSION_KEY": "agent:main:discord:group:MY_BUGS_ROOT:111", "HERMES_SESSION_CHAT_ID": "MY_BUGS_ROOT",
			"HERMES_SESSION_THREAD_ID": "", "HERMES_SESSION_MESSAGE_ID": "",
		}},
		{"a top-level post binds thread \"\", which overrides the stale thread", otelsession.Bind(context.Background(), otelsession.Session{
			SessionKey: "mm:chan", Platform: "mattermost", ChatID: "chan",
		}), false, map[string]string{
			"HERMES_SESSION_KEY": "mm:chan", "HERMES_SESSION_CHAT_ID": "chan",
			"HERMES_SESSION_THREAD_ID": "", "HERMES_SESSION_MESSAGE_ID": "",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, spawnView(tt.ctx, staleGlobal, tt.engaged))
		})
	}
}

// A queued turn B run from inside turn A sees B's full identity, and A sees its
// own again afterwards: nothing to restore, since B's context was derived.
func TestNestedTurnRebindsAndParentKeepsItsOwn(t *testing.T) {
	t.Parallel()
	a := otelsession.Session{Platform: "discord", ChatID: "THREAD_A", ThreadID: "THREAD_A",
		SessionKey: "agent:main:discord:thread:THREAD_A:THREAD_A", SessionID: "SID_A", MessageID: "MSG_A"}
	b := otelsession.Session{Platform: "discord", ChatID: "THREAD_B", ThreadID: "THREAD_B",
		SessionKey: "agent:main:discord:thread:THREAD_B:THREAD_B", SessionID: "SID_B", MessageID: "MSG_B"}
	ctxA := otelsession.Bind(context.Background(), a)
	before := spawnView(ctxA, nil, true)
	ctxB := otelsession.Bind(otelsession.Reset(ctxA), b)
	inB := spawnView(ctxB, nil, true)
	after := spawnView(ctxA, nil, true)
	assert.Equal(t, viewOf(a), before)
	assert.Equal(t, viewOf(b), inB)
	assert.Equal(t, viewOf(a), after)

	// A same-session follow-up (a /steer fallback) rebinds with its own anchor.
	steer := a
	steer.MessageID = "STEER_MSG"
	assert.Equal(t, "STEER_MSG", otelsession.Getenv(otelsession.Bind(ctxA, steer), "HERMES_SESSION_MESSAGE_ID", ""))
}

// The same delegated-children scenario as TestDelegatedChildren, against the
// real process environment (so it does not run in parallel).
func TestDelegatedChildrenKeepProcessEnvironment(t *testing.T) {
	t.Setenv(fallback.SessionIDVar, "before")
	root := otelsession.WithSessionID(context.Background(), "parent-os")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			child := otelsession.WithSessionID(otelsession.WithDelegatedChild(root, fmt.Sprint("c", i)), fmt.Sprint("c", i))
			if got := otelsession.Getenv(child, fallback.SessionIDVar, ""); got != fmt.Sprint("c", i) {
				t.Errorf("child %d sees %q", i, got)
			}
		})
	}
	wg.Wait()
	v, _ := fallback.OS{}.LookupEnv(fallback.SessionIDVar)
	assert.Equal(t, "parent-os", v, "children never write the process environment")
	assert.Equal(t, "parent-os", otelsession.Getenv(otelsession.Reset(root), fallback.SessionIDVar, ""),
		"an Unset id falls back to the root's mirror")
}
