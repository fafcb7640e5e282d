package execsession_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/execsession"
)

// environCase is one row of the truth table of Environ: a context, what the
// parent inherited, whether the parent is engaged, and what the child's
// environment must hold.
type environCase struct {
	name      string
	engaged   bool
	ctx       func(context.Context) context.Context
	inherited []string
	want      map[string]string // variables present with this value
	absent    []string          // variables that must be absent
	members   map[string]string // BAGGAGE members, decoded
	noMembers []string          // BAGGAGE members that must be absent
}

const (
	threadVar = "HERMES_SESSION_THREAD_ID"
	tabVar    = "HERMES_UI_SESSION_ID"
	idVar     = "HERMES_SESSION_ID"
)

// foreignEnv is what a gateway's process environment looks like after some
// other message wrote its session there.
var foreignEnv = []string{
	"PATH=/usr/bin",
	threadVar + "=foreign-thread",
	tabVar + "=foreign-tab",
	execsession.CwdVar + "=/foreign/dir",
	"HOME=/home/gateway",
}

var staleCarriers = []string{
	"BAGGAGE=session.thread_id=stale-thread,tenant=stale",
	"TRACEPARENT=00-0123456789abcdef0123456789abcdef-0123456789abcdef-01",
	"TRACESTATE=stale=1",
}

func nothing(ctx context.Context) context.Context { return ctx }

// environCases builds contexts with With, WithCwd and WithDelegatedChild only,
// which never latch Engaged, so the not-engaged rows can be computed in a
// fresh process (modeEnvironRows).
func environCases() []environCase {
	setThread := func(ctx context.Context) context.Context {
		return otelsession.With(ctx, otelsession.FieldThreadID, "t1")
	}
	clearThread := func(ctx context.Context) context.Context {
		return otelsession.With(ctx, otelsession.FieldThreadID, "")
	}
	var rows []environCase
	// both adds the row for an engaged and a never engaged parent, when the
	// leak policy does not depend on it.
	both := func(c environCase) {
		name := c.name
		c.engaged, c.name = true, "engaged/"+name
		rows = append(rows, c)
		c.engaged, c.name = false, "not_engaged/"+name
		rows = append(rows, c)
	}
	both(environCase{
		name: "a set field overrides the inherited variable", ctx: setThread, inherited: foreignEnv,
		want:    map[string]string{threadVar: "t1"},
		members: map[string]string{"session.thread_id": "t1"},
	})
	both(environCase{
		name: "a cleared field is empty and masks the inherited variable", ctx: clearThread, inherited: foreignEnv,
		want:    map[string]string{threadVar: ""},
		members: map[string]string{"session.thread_id": otelsession.ClearedValue},
	})
	rows = append(rows, environCase{
		name: "engaged/an unset field is stripped", engaged: true, ctx: nothing, inherited: foreignEnv,
		absent: []string{threadVar, "BAGGAGE"},
	}, environCase{
		name: "not_engaged/an unset field is inherited", ctx: nothing, inherited: foreignEnv,
		want:   map[string]string{threadVar: "foreign-thread"},
		absent: []string{"BAGGAGE"},
	})
	both(environCase{
		name: "an unset field absent from the inherited environment stays absent", ctx: nothing,
		inherited: []string{"PATH=/usr/bin"},
		absent:    []string{threadVar, tabVar, execsession.CwdVar},
	})
	both(environCase{
		name: "a local field is a variable and never a baggage member", inherited: foreignEnv,
		ctx: func(ctx context.Context) context.Context {
			return otelsession.With(setThread(ctx), otelsession.FieldUISessionID, "tab-1")
		},
		want:      map[string]string{tabVar: "tab-1", threadVar: "t1"},
		noMembers: []string{"session.ui_session_id"},
	})
	rows = append(rows, environCase{
		name: "engaged/an unset local field is stripped", engaged: true, ctx: nothing, inherited: foreignEnv,
		absent: []string{tabVar},
	}, environCase{
		name: "not_engaged/an unset local field is inherited", ctx: nothing, inherited: foreignEnv,
		want: map[string]string{tabVar: "foreign-tab"},
	})
	both(environCase{
		name: "the working directory is a variable", inherited: foreignEnv,
		ctx:       func(ctx context.Context) context.Context { return otelsession.WithCwd(ctx, "/srv/work/alice") },
		want:      map[string]string{execsession.CwdVar: "/srv/work/alice"},
		noMembers: []string{otelsession.CwdKey},
	})
	rows = append(rows, environCase{
		name: "engaged/no working directory strips the inherited one", engaged: true, ctx: nothing, inherited: foreignEnv,
		absent: []string{execsession.CwdVar},
	}, environCase{
		name: "not_engaged/no working directory inherits the variable", ctx: nothing, inherited: foreignEnv,
		want: map[string]string{execsession.CwdVar: "/foreign/dir"},
	})
	both(environCase{
		name: "a delegated child is marked and carries its own id", inherited: append(foreignEnv, idVar+"=root-id"),
		ctx:     func(ctx context.Context) context.Context { return otelsession.WithDelegatedChild(ctx, "child-id") },
		want:    map[string]string{execsession.DelegatedChildVar: "1", idVar: "child-id"},
		members: map[string]string{"session.id": "child-id"},
	})
	both(environCase{
		name: "an inherited delegated-child mark is kept: the whole lineage is delegated", ctx: setThread,
		inherited: append(foreignEnv, execsession.DelegatedChildVar+"=1"),
		want:      map[string]string{execsession.DelegatedChildVar: "1"},
	})
	both(environCase{
		name: "the original's board-root mark is kept as it is", inherited: append(foreignEnv, execsession.DelegatedChildVar+"=/srv/kanban"),
		ctx:  func(ctx context.Context) context.Context { return otelsession.WithDelegatedChild(ctx, "child-id") },
		want: map[string]string{execsession.DelegatedChildVar: "/srv/kanban"},
	})
	both(environCase{
		name: "an inherited empty mark is removed", ctx: setThread,
		inherited: append(foreignEnv, execsession.DelegatedChildVar+"="),
		absent:    []string{execsession.DelegatedChildVar},
	})
	both(environCase{
		name: "a delegated child's command replaces an inherited empty mark", inherited: append(foreignEnv, execsession.DelegatedChildVar+"="),
		ctx:  func(ctx context.Context) context.Context { return otelsession.WithDelegatedChild(ctx, "child-id") },
		want: map[string]string{execsession.DelegatedChildVar: "1"},
	})
	both(environCase{
		name: "a delegated child without an id keeps its parent's",
		ctx: func(ctx context.Context) context.Context {
			return otelsession.WithDelegatedChild(otelsession.With(ctx, otelsession.FieldSessionID, "root-id"), "")
		},
		inherited: foreignEnv,
		want:      map[string]string{execsession.DelegatedChildVar: "1", idVar: "root-id"},
		members:   map[string]string{"session.id": "root-id"},
	})
	kanbanRun := []string{
		"HERMES_KANBAN_TASK=t_parent", "HERMES_KANBAN_RUN_ID=18", "HERMES_KANBAN_CLAIM_LOCK=lock",
		"HERMES_KANBAN_GOAL_MODE=1", "HERMES_KANBAN_GOAL_MAX_TURNS=40",
		"HERMES_KANBAN_BOARD=default", "HERMES_KANBAN_DB=/srv/kanban/default.db",
		"HERMES_KANBAN_WORKSPACE=/srv/ws/t_parent", "HERMES_KANBAN_WORKSPACES_ROOT=/srv/ws",
	}
	kanbanLocation := map[string]string{
		"HERMES_KANBAN_BOARD": "default", "HERMES_KANBAN_DB": "/srv/kanban/default.db",
		"HERMES_KANBAN_WORKSPACE": "/srv/ws/t_parent", "HERMES_KANBAN_WORKSPACES_ROOT": "/srv/ws",
	}
	both(environCase{
		name: "the Kanban run identity is never inherited, the board's location is", ctx: setThread,
		inherited: append(slices.Clone(foreignEnv), kanbanRun...),
		want:      kanbanLocation,
		absent:    fallback.KanbanRunIdentityVars(),
	})
	both(environCase{
		name: "nor by a delegated child", inherited: append(slices.Clone(foreignEnv), kanbanRun...),
		ctx:    func(ctx context.Context) context.Context { return otelsession.WithDelegatedChild(ctx, "") },
		want:   kanbanLocation,
		absent: fallback.KanbanRunIdentityVars(),
	})
	both(environCase{
		name: "stale inherited carriers are removed when the context has none", ctx: nothing,
		inherited: append(foreignEnv, staleCarriers...),
		absent:    []string{"BAGGAGE", "TRACEPARENT", "TRACESTATE"},
	})
	both(environCase{
		name: "stale inherited carriers are replaced by the context's", inherited: append(staleCarriers, foreignEnv...),
		ctx: func(ctx context.Context) context.Context {
			return setThread(trace.ContextWithSpanContext(ctx, testTrace))
		},
		want:      map[string]string{"TRACEPARENT": testTraceparent, "TRACESTATE": "vendor=opaque"},
		members:   map[string]string{"session.thread_id": "t1"},
		noMembers: []string{"tenant"},
	})
	both(environCase{
		name: "baggage members that are not session fields travel too", inherited: foreignEnv,
		ctx: func(ctx context.Context) context.Context {
			m, _ := baggage.NewMemberRaw("tenant", "acme")
			b, _ := baggage.New(m)
			return setThread(baggage.ContextWithBaggage(ctx, b))
		},
		members: map[string]string{"tenant": "acme", "session.thread_id": "t1"},
	})
	rows = append(rows, environCase{
		name: "not_engaged/the last of duplicate inherited variables is the one inherited", ctx: nothing,
		inherited: []string{threadVar + "=first", "PATH=/usr/bin", threadVar + "=last"},
		want:      map[string]string{threadVar: "last"},
	})
	both(environCase{
		name: "an inherited entry without = is read as empty", ctx: setThread,
		inherited: []string{"PATH=/usr/bin", "MALFORMED", tabVar},
		want:      map[string]string{threadVar: "t1"},
	})
	rows = append(rows, environCase{
		name: "not_engaged/an inherited session entry without = is passed on as empty", ctx: nothing,
		inherited: []string{tabVar, "PATH=/usr/bin"},
		want:      map[string]string{tabVar: ""},
	})
	return rows
}

// The engaged rows run here; the not-engaged rows in a fresh process, since
// this one latched Engaged in TestMain.
func TestEnviron(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(testCtx(t), os.Args[0], "-test.run=^$")
	var fresh map[string][]string
	require.NoError(t, run(cmd, modeEnvironRows, &fresh), "fresh process")

	for _, c := range environCases() {
		t.Run(c.name, func(t *testing.T) {
			var env []string
			if c.engaged {
				env = execsession.Environ(c.ctx(context.Background()), c.inherited)
			} else {
				var ok bool
				env, ok = fresh[c.name]
				require.True(t, ok, "the fresh process computed no result for this row")
			}
			checkEnviron(t, c, env)
		})
	}
}

func checkEnviron(t *testing.T, c environCase, env []string) {
	t.Helper()
	got := map[string]string{}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		_, dup := got[name]
		assert.False(t, dup, "%s appears twice in %q", name, env)
		got[name] = value
	}
	for name, want := range c.want {
		v, ok := got[name]
		if assert.True(t, ok, "%s is missing from %q", name, env) {
			assert.Equal(t, want, v, name)
		}
	}
	for _, name := range c.absent {
		assert.NotContains(t, got, name)
	}
	bag, err := baggage.Parse(got["BAGGAGE"])
	require.NoError(t, err, "BAGGAGE=%s", got["BAGGAGE"])
	for key, want := range c.members {
		m := bag.Member(key)
		if assert.NotEmpty(t, m.Key(), "member %s is missing from BAGGAGE=%s", key, got["BAGGAGE"]) {
			assert.Equal(t, want, m.Value(), key)
		}
	}
	for _, key := range c.noMembers {
		assert.Empty(t, bag.Member(key).Key(), "member %s in BAGGAGE=%s", key, got["BAGGAGE"])
	}
	// Variables the bridge does not manage keep their order.
	assert.Equal(t, unmanaged(c.inherited), unmanaged(env))
}

func unmanaged(env []string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(managedVars, name) {
			out = append(out, kv)
		}
	}
	return out
}

// Environ builds a new slice: the caller's is left as it was.
func TestEnvironLeavesInheritedAlone(t *testing.T) {
	t.Parallel()
	inherited := append([]string(nil), append(foreignEnv, staleCarriers...)...)
	before := append([]string(nil), inherited...)
	execsession.Environ(otelsession.With(context.Background(), otelsession.FieldThreadID, "t1"), inherited)
	assert.Equal(t, before, inherited)
}
