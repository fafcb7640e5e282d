package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwire/sessionwire/fallback"
)

func TestDecideTruthTable(t *testing.T) {
	t.Parallel()
	const inherited = "foreign-thread"
	tests := []struct {
		state     string // bound, cleared, unset
		engaged   bool
		present   bool
		wantValue string
		wantKeep  bool
	}{
		{"bound", true, true, "mine", true},
		{"bound", true, false, "mine", true},
		{"bound", false, true, "mine", true},
		{"bound", false, false, "mine", true},
		{"cleared", true, true, "", true},
		{"cleared", true, false, "", true},
		{"cleared", false, true, "", true},
		{"cleared", false, false, "", true},
		{"unset", true, true, "", false},
		{"unset", true, false, "", false},
		{"unset", false, true, inherited, true},
		{"unset", false, false, "", false},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s/engaged=%t/inherited=%t", tt.state, tt.engaged, tt.present)
		t.Run(name, func(t *testing.T) {
			v := fallback.Var{Name: "HERMES_SESSION_THREAD_ID"}
			switch tt.state {
			case "bound":
				v.Bound, v.Value = true, "mine"
			case "cleared":
				v.Bound = true
			}
			in := ""
			if tt.present {
				in = inherited
			}
			value, keep := fallback.Decide(v, in, tt.present, tt.engaged)
			assert.Equal(t, tt.wantKeep, keep)
			assert.Equal(t, tt.wantValue, value)
		})
	}
}

func TestChildEnviron(t *testing.T) {
	t.Parallel()
	inherited := []string{
		"PATH=/usr/bin",
		"HERMES_SESSION_CHAT_ID=foreign-chat",
		"HOME=/root",
		"HERMES_SESSION_THREAD_ID=foreign-thread",
		"HERMES_SESSION_USER_ID=foreign-user",
		"HERMES_SESSION_THREAD_ID=later-foreign-thread", // the last entry counts, as in exec.Cmd
		"NOT_A_PAIR",
	}
	vars := []fallback.Var{
		{Name: "HERMES_SESSION_CHAT_ID", Bound: true, Value: "mine"},
		{Name: "HERMES_SESSION_THREAD_ID", Bound: true}, // Cleared
		{Name: "HERMES_SESSION_USER_ID"},                // Unset
		{Name: "HERMES_SESSION_SCOPE_ID"},               // Unset, not inherited
	}
	before := slices.Clone(inherited)

	t.Run("engaged", func(t *testing.T) {
		got := fallback.ChildEnviron(inherited, vars, true)
		assert.Equal(t, []string{
			"PATH=/usr/bin", "HOME=/root", "NOT_A_PAIR",
			"HERMES_SESSION_CHAT_ID=mine",
			"HERMES_SESSION_THREAD_ID=",
		}, got)
	})
	t.Run("not engaged", func(t *testing.T) {
		got := fallback.ChildEnviron(inherited, vars, false)
		assert.Equal(t, []string{
			"PATH=/usr/bin", "HOME=/root", "NOT_A_PAIR",
			"HERMES_SESSION_CHAT_ID=mine",
			"HERMES_SESSION_THREAD_ID=",
			"HERMES_SESSION_USER_ID=foreign-user",
		}, got)
	})
	assert.Equal(t, before, inherited, "the inherited slice must not be modified")
}

func TestMapEnv(t *testing.T) {
	t.Parallel()
	var zero fallback.Map
	_, ok := zero.LookupEnv("X")
	assert.False(t, ok)
	require.NoError(t, zero.Setenv("X", "1"))
	assert.Equal(t, "1", zero.Getenv("X"))

	src := map[string]string{"A": "a", "EMPTY": ""}
	m := fallback.NewMap(src)
	src["A"] = "changed"
	v, ok := m.LookupEnv("A")
	assert.True(t, ok)
	assert.Equal(t, "a", v, "NewMap copies its input")
	v, ok = m.LookupEnv("EMPTY")
	assert.True(t, ok, "an empty variable exists")
	assert.Empty(t, v)

	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			_ = m.Setenv(fmt.Sprint("K", i), "v")
			_, _ = m.LookupEnv("A")
		})
	}
	wg.Wait()
}

func TestEnvFrom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	assert.Equal(t, fallback.OS{}, fallback.EnvFrom(ctx), "the process environment is the default")
	m := fallback.NewMap(map[string]string{"K": "v"})
	ctx = fallback.WithEnv(ctx, m)
	assert.Same(t, m, fallback.EnvFrom(ctx))
	assert.Equal(t, "v", fallback.Getenv(ctx, "K"))
	assert.Equal(t, fallback.OS{}, fallback.EnvFrom(fallback.WithEnv(ctx, nil)), "nil restores the default")
}

// The process environment is global, so this test does not run in parallel.
func TestOSEnvAndMirror(t *testing.T) {
	t.Setenv(fallback.SessionIDVar, "before")
	require.NoError(t, fallback.MirrorSessionID(fallback.OS{}, "root-1"))
	v, ok := fallback.OS{}.LookupEnv(fallback.SessionIDVar)
	assert.True(t, ok)
	assert.Equal(t, "root-1", v)
}

type failingEnv struct{ fallback.Map }

var errReadOnly = errors.New("read-only environment")

func (*failingEnv) Setenv(string, string) error { return errReadOnly }

func TestMirrorErrorIsWrapped(t *testing.T) {
	t.Parallel()
	err := fallback.MirrorSessionID(&failingEnv{}, "x")
	require.ErrorIs(t, err, errReadOnly)
	assert.Contains(t, err.Error(), fallback.SessionIDVar)
}

func TestDelegatedMark(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		inherited string
		present   bool
		delegated bool
		want      string
		keep      bool
	}{
		{"a root's child is not marked", "", false, false, "", false},
		{"a delegated child's command is stamped", "", false, true, "1", true},
		{"an inherited mark is kept: the lineage is delegated", "1", true, false, "1", true},
		{"an inherited board-root mark keeps its value", "/srv/kanban", true, true, "/srv/kanban", true},
		{"an inherited empty mark means nothing", "", true, false, "", false},
		{"an inherited empty mark is replaced on a delegated command", "", true, true, "1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, keep := fallback.DelegatedMark(tt.inherited, tt.present, tt.delegated)
			assert.Equal(t, tt.keep, keep)
			assert.Equal(t, tt.want, v)
		})
	}
}

func TestKanbanRunIdentity(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"HERMES_KANBAN_TASK", "HERMES_KANBAN_RUN_ID", "HERMES_KANBAN_CLAIM_LOCK"} {
		assert.True(t, fallback.IsKanbanRunIdentity(name), name)
		assert.Contains(t, fallback.KanbanRunIdentityVars(), name)
	}
	for _, name := range []string{"HERMES_KANBAN_BOARD", "HERMES_KANBAN_DB", "HERMES_KANBAN_WORKSPACE", "HERMES_KANBAN_WORKSPACES_ROOT", "HERMES_SESSION_ID", ""} {
		assert.False(t, fallback.IsKanbanRunIdentity(name), "%s is a location or not Kanban's", name)
	}
	vars := fallback.KanbanRunIdentityVars()
	vars[0] = "changed"
	assert.True(t, fallback.IsKanbanRunIdentity("HERMES_KANBAN_TASK"), "the returned slice is a copy")

	got := fallback.ChildEnviron([]string{
		"HERMES_KANBAN_TASK=t1", "PATH=/usr/bin", "HERMES_KANBAN_BOARD=default", "HERMES_KANBAN_CLAIM_LOCK=lock",
	}, nil, false)
	assert.Equal(t, []string{"PATH=/usr/bin", "HERMES_KANBAN_BOARD=default"}, got)
}
