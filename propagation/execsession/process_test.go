package execsession_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/execsession"
)

// Every test here starts real child processes: the test binary itself, in
// one of the modes of main_test.go.

func fullSession(cwd string) otelsession.Session {
	return otelsession.Session{
		Platform: "telegram", Source: "gateway", ChatID: "-1001234567890", ChatType: "supergroup",
		ChatName: "Ops ☕ room", ThreadID: "17585", UserID: "u-42", UserIDAlt: "@alice",
		UserName: "Alice Smith", ScopeID: "guild-7", SessionKey: "agent:main:telegram:-1001234567890:17585",
		SessionID: "20261201_101500_ab12cd", UISessionID: "tab-3", MessageID: "88121", Profile: "work",
		BrowserControlPrincipal: "alice@laptop", BrowserControlTransportFamily: "unix",
		ParentChatID: "-1001234567000", Cron: otelsession.CronOff, Cwd: cwd,
	}
}

// testCtx bounds every child a test starts.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func child(t *testing.T, cmd *exec.Cmd, mode string) *report {
	t.Helper()
	r, err := start(cmd, mode)
	require.NoError(t, err)
	return r
}

// requireSeen checks a field as the child sees it: its state, and the value
// that both otelsession.Getenv and os.Getenv return there.
func requireSeen(t *testing.T, r *report, f otelsession.Field, want string, st otelsession.State) {
	t.Helper()
	got := r.Fields[f.Name()]
	assert.Equal(t, st.String(), got.State, "%s state", f.Name())
	assert.Equal(t, want, got.Value, "%s value", f.Name())
	assert.Equal(t, want, got.Getenv, "%s through otelsession.Getenv", f.Name())
	env, ok := r.Env[f.Name()]
	assert.True(t, ok, "%s is not in the child's environment", f.Name())
	assert.Equal(t, want, env, "%s through os.Getenv", f.Name())
}

// requireAbsent checks that the child sees nothing at all for f.
func requireAbsent(t *testing.T, r *report, f otelsession.Field) {
	t.Helper()
	got := r.Fields[f.Name()]
	assert.Equal(t, otelsession.Unset.String(), got.State, "%s state", f.Name())
	assert.Equal(t, defaultMark, got.Getenv, "%s through otelsession.Getenv", f.Name())
	assert.NotContains(t, r.Env, f.Name(), "%s in the child's environment", f.Name())
}

func TestChildSeesTheWholeSession(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := fullSession(dir)
	ctx := trace.ContextWithSpanContext(otelsession.Bind(testCtx(t), s), testTrace)
	r := child(t, execsession.Command(ctx, os.Args[0], "-test.run=^$"), modeReport)

	require.Empty(t, r.Err)
	for _, f := range otelsession.Fields() {
		want, st := otelsession.Lookup(ctx, f)
		if st == otelsession.Unset {
			requireAbsent(t, r, f)
			continue
		}
		requireSeen(t, r, f, want, st)
	}
	requireSeen(t, r, otelsession.FieldCronSession, "", otelsession.Cleared)
	requireSeen(t, r, otelsession.FieldUISessionID, "tab-3", otelsession.Set)
	requireSeen(t, r, otelsession.FieldBrowserControlPrincipal, "alice@laptop", otelsession.Set)
	assert.Equal(t, dir, r.Cwd, "logical working directory")
	wantWd, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	gotWd, err := filepath.EvalSymlinks(r.Wd)
	require.NoError(t, err)
	assert.Equal(t, wantWd, gotWd, "the child starts in the session's directory")
	assert.Equal(t, testTrace.TraceID().String(), r.TraceID)
	assert.False(t, r.Delegated)
	assert.False(t, r.Engaged, "restoring a session does not latch Engaged in the child")
	for _, key := range []string{"session.ui_session_id", "session.browser_control_principal", otelsession.CwdKey} {
		assert.NotContains(t, r.Env["BAGGAGE"], key, "local state never enters BAGGAGE")
	}
}

// The bug the seed fixed, across a process boundary: the gateway's process
// environment holds whichever session wrote it last.
func TestEngagedParentStripsAForeignInheritedSession(t *testing.T) {
	t.Parallel()
	ctx := otelsession.With(testCtx(t), otelsession.FieldChatID, "my-chat")
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = execsession.Environ(ctx, append(os.Environ(),
		"HERMES_SESSION_THREAD_ID=foreign-thread",
		"HERMES_SESSION_USER_ID=foreign-user",
		"HERMES_UI_SESSION_ID=foreign-tab",
		"HERMES_SESSION_CHAT_ID=foreign-chat",
	))
	r := child(t, cmd, modeReport)

	require.Empty(t, r.Err)
	requireAbsent(t, r, otelsession.FieldThreadID)
	requireAbsent(t, r, otelsession.FieldUserID)
	requireAbsent(t, r, otelsession.FieldUISessionID)
	requireSeen(t, r, otelsession.FieldChatID, "my-chat", otelsession.Set)
}

func TestNeverEngagedParentPassesItsSessionThrough(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(testCtx(t), os.Args[0], "-test.run=^$")
	r := child(t, cmd, modePassThrough)

	require.False(t, r.ParentEngaged, "the parent must be a process that never bound a session")
	require.Empty(t, r.Err)
	// Unset in the child (nothing in BAGGAGE), read from its environment.
	got := r.Fields[threadVar]
	assert.Equal(t, otelsession.Unset.String(), got.State)
	assert.Equal(t, "inherited-thread", got.Getenv)
	assert.Equal(t, "inherited-thread", r.Env[threadVar])
	requireSeen(t, r, otelsession.FieldUISessionID, "inherited-tab", otelsession.Set)
	assert.Equal(t, "/inherited/dir", r.Cwd)
	// A field the parent's context binds still wins.
	requireSeen(t, r, otelsession.FieldChatID, "bound-chat", otelsession.Set)
}

func TestBoundValueBeatsAForeignInheritedValue(t *testing.T) {
	t.Parallel()
	ctx := otelsession.Bind(testCtx(t), otelsession.Session{ThreadID: "mine", UISessionID: "my-tab"})
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = execsession.Environ(ctx, append(os.Environ(), threadVar+"=foreign", tabVar+"=foreign-tab"))
	r := child(t, cmd, modeReport)

	requireSeen(t, r, otelsession.FieldThreadID, "mine", otelsession.Set)
	requireSeen(t, r, otelsession.FieldUISessionID, "my-tab", otelsession.Set)
}

func TestClearedReachesTheChildAsCleared(t *testing.T) {
	t.Parallel()
	ctx := otelsession.Clear(otelsession.Bind(testCtx(t), fullSession("/srv")))
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = execsession.Environ(ctx, append(os.Environ(), threadVar+"=stale", tabVar+"=stale-tab"))
	r := child(t, cmd, modeReport)

	require.Empty(t, r.Err)
	for _, f := range otelsession.Fields() {
		if f.InSession() {
			requireSeen(t, r, f, "", otelsession.Cleared)
		}
	}
	bag, err := baggage.Parse(r.Env["BAGGAGE"])
	require.NoError(t, err)
	assert.Equal(t, otelsession.ClearedValue, bag.Member("session.thread_id").Value(), "Cleared travels as %%00 in BAGGAGE")
	assert.Contains(t, r.Env["BAGGAGE"], "session.thread_id=%00")
}

// Not parallel: it sets the process environment, as a root session does.
func TestDelegatedChildGetsItsOwnIDAndTheParentKeepsItsOwn(t *testing.T) {
	t.Setenv(idVar, "before")
	root := otelsession.WithSessionID(otelsession.Bind(testCtx(t), otelsession.Session{ThreadID: "17585"}), "root-id")
	require.Equal(t, "root-id", os.Getenv(idVar), "a root context mirrors its id")
	delegated := otelsession.WithDelegatedChild(root, "child-id")

	r := child(t, execsession.Command(delegated, os.Args[0], "-test.run=^$"), modeReport)

	require.Empty(t, r.Err)
	assert.True(t, r.Delegated)
	assert.Equal(t, "1", r.Env[execsession.DelegatedChildVar])
	requireSeen(t, r, otelsession.FieldSessionID, "child-id", otelsession.Set)
	requireSeen(t, r, otelsession.FieldThreadID, "17585", otelsession.Set)
	assert.Equal(t, "root-id", os.Getenv(idVar), "the parent's process environment is untouched")

	r = child(t, execsession.Command(root, os.Args[0], "-test.run=^$"), modeReport)
	assert.False(t, r.Delegated, "a sibling started from the root is not delegated")
	assert.NotContains(t, r.Env, execsession.DelegatedChildVar)
	requireSeen(t, r, otelsession.FieldSessionID, "root-id", otelsession.Set)
}

func TestGrandchildSeesTheSession(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := fullSession(dir)
	s.ThreadID = ""
	ctx := otelsession.WithDelegatedChild(otelsession.Bind(testCtx(t), s), "child-id")
	ctx = trace.ContextWithSpanContext(ctx, testTrace)
	r := child(t, execsession.Command(ctx, os.Args[0], "-test.run=^$"), modeRelay)

	require.Empty(t, r.Err)
	g := r.Grandchild
	require.NotNil(t, g)
	require.Empty(t, g.Err)
	for _, f := range otelsession.Fields() {
		want, st := otelsession.Lookup(ctx, f)
		if st == otelsession.Unset {
			requireAbsent(t, g, f)
			continue
		}
		requireSeen(t, g, f, want, st)
	}
	requireSeen(t, g, otelsession.FieldThreadID, "", otelsession.Cleared)
	requireSeen(t, g, otelsession.FieldSessionID, "child-id", otelsession.Set)
	requireSeen(t, g, otelsession.FieldUISessionID, "tab-3", otelsession.Set)
	assert.Equal(t, dir, g.Cwd)
	assert.True(t, g.Delegated)
	assert.Equal(t, testTrace.TraceID().String(), g.TraceID)
}

// Not parallel: the process environment holds a session, as the seed's
// gateway did after the last message wrote it.
func TestConcurrentSessionsEachChildSeesItsOwn(t *testing.T) {
	t.Setenv(threadVar, "last-writer")
	t.Setenv("HERMES_SESSION_CHAT_ID", "last-writer")
	const sessions = 100
	// Every session runs at once; process starts are bounded so that a
	// two-core machine is not swamped.
	starts := make(chan struct{}, 8)
	base := testCtx(t)
	var wg sync.WaitGroup
	errs := make([]error, sessions)
	for i := range sessions {
		wg.Go(func() {
			ctx := otelsession.Bind(base, otelsession.Session{
				Platform: "slack", ChatID: fmt.Sprint("chat-", i), ThreadID: fmt.Sprint("thread-", i),
				UISessionID: fmt.Sprint("tab-", i),
			})
			starts <- struct{}{}
			defer func() { <-starts }()
			r, err := start(execsession.Command(ctx, os.Args[0], "-test.run=^$"), modeReport)
			if err != nil {
				errs[i] = err
				return
			}
			for _, c := range [][3]string{
				{"HERMES_SESSION_CHAT_ID", fmt.Sprint("chat-", i), r.Env["HERMES_SESSION_CHAT_ID"]},
				{threadVar, fmt.Sprint("thread-", i), r.Env[threadVar]},
				{threadVar + " (Getenv)", fmt.Sprint("thread-", i), r.Fields[threadVar].Getenv},
				{tabVar, fmt.Sprint("tab-", i), r.Fields[tabVar].Value},
			} {
				if c[1] != c[2] {
					errs[i] = fmt.Errorf("session %d: child saw %s=%q, want %q", i, c[0], c[2], c[1])
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		assert.NoError(t, err)
	}
}

func TestMalformedEnvironmentGivesAnErrorAndAnUnsetSession(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		env    []string
		wantIs string
	}{
		{"bad percent-encoding", []string{"BAGGAGE=session.thread_id=%zz,session.chat_id=c"}, "propagation.ErrMalformedMember"},
		{"duplicated member", []string{"BAGGAGE=session.thread_id=a,session.thread_id=b"}, "propagation.ErrDuplicateMember"},
		{"over 8192 bytes", []string{"BAGGAGE=session.thread_id=t,pad=" + strings.Repeat("x", 8200)}, "propagation.ErrBaggageTooLarge"},
		{"CRLF in a value", []string{"BAGGAGE=session.thread_id=a%0D%0Ab,session.chat_id=c"}, "propagation.ErrInvalidValue"},
		{"local field in BAGGAGE", []string{"BAGGAGE=session.ui_session_id=tab,session.chat_id=c"}, "propagation.ErrLocalField"},
		{"local field over the value limit", []string{"BAGGAGE=session.chat_id=c", tabVar + "=" + strings.Repeat("t", 600)}, "ErrInvalidVariable"},
		{"working directory over the value limit", []string{"BAGGAGE=session.chat_id=c", execsession.CwdVar + "=/" + strings.Repeat("d", 4096)}, "ErrInvalidVariable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := []string{"PATH=" + os.Getenv("PATH"), "TRACEPARENT=" + testTraceparent}
			cmd := exec.CommandContext(testCtx(t), os.Args[0], "-test.run=^$")
			cmd.Env = append(env, c.env...)
			r := child(t, cmd, modeReport)

			assert.NotEmpty(t, r.Err)
			assert.Contains(t, r.ErrIs, c.wantIs, "error: %s", r.Err)
			for _, f := range otelsession.Fields() {
				assert.Equal(t, otelsession.Unset.String(), r.Fields[f.Name()].State, f.Name())
			}
			assert.Empty(t, r.Cwd)
			assert.False(t, r.Delegated)
			assert.Equal(t, testTrace.TraceID().String(), r.TraceID, "trace context is kept")
		})
	}
}

// A tool that knows nothing of sessionwire (here a shell script) still reads
// its session from the legacy variables and runs in the session's directory.
func TestShellToolReadsTheLegacyVariables(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this machine")
	}
	dir := t.TempDir()
	ctx := otelsession.Bind(testCtx(t), otelsession.Session{ThreadID: "17585", UISessionID: "tab-3", Cwd: dir})
	cmd := execsession.Command(ctx, sh, "-c", `printf '%s|%s|%s|%s' "$HERMES_SESSION_THREAD_ID" "$HERMES_UI_SESSION_ID" "${HERMES_SESSION_CHAT_ID-unset}" "$(pwd -P)"`)
	out, err := cmd.Output()
	require.NoError(t, err)
	wantWd, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	assert.Equal(t, "17585|tab-3||"+wantWd, string(out), "thread|tab|chat (Cleared: empty, not unset)|directory")
}

// Whatever started the gateway may have left BAGGAGE and TRACEPARENT in its
// environment: a child must see the trace and session of its own context, or
// none at all.
func TestStaleInheritedCarriersNeverReachTheChild(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		ctx       func(context.Context) context.Context
		wantTrace string
		wantChat  string
	}{
		{"replaced by the context's", func(ctx context.Context) context.Context {
			return trace.ContextWithSpanContext(otelsession.With(ctx, otelsession.FieldThreadID, "mine"), testTrace)
		}, testTrace.TraceID().String(), "mine"},
		{"removed when the context has none", func(ctx context.Context) context.Context { return ctx }, "", defaultMark},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := c.ctx(testCtx(t))
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = execsession.Environ(ctx, append(os.Environ(), staleCarriers...))
			r := child(t, cmd, modeReport)

			require.Empty(t, r.Err)
			assert.Equal(t, c.wantTrace, r.TraceID)
			assert.Equal(t, c.wantChat, r.Fields[threadVar].Getenv)
			assert.NotContains(t, r.Foreign, "tenant", "a foreign member of the stale BAGGAGE")
			assert.NotEqual(t, "stale=1", r.Env["TRACESTATE"])
		})
	}
}
