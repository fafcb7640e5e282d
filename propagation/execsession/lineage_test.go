package execsession_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/execsession"
)

// A delegated child's lineage, in real processes: the test starts a worker
// the way a Kanban dispatcher does (its run identity in its environment); the
// worker binds a session, as an agent does, and starts
//
//   - a delegated child without an id of its own that restores its session
//     and starts a grandchild with it (modeRelay),
//   - the same delegated child, which this time starts its grandchild
//     without restoring anything (modeRelayPlain), as a shell script would,
//   - a sibling that is not delegated (modeReport),
//
// then reports what each saw and what its own environment holds afterwards.

// workerReport is what the worker process saw.
type workerReport struct {
	// Own holds the worker's own HERMES_KANBAN_* and delegated-child mark
	// after its children ran.
	Own            map[string]string `json:"own"`
	AsyncDelivery  bool              `json:"async_delivery"`
	Delegated      *report           `json:"delegated"`
	DelegatedPlain *report           `json:"delegated_plain"`
	Sibling        *report           `json:"sibling"`
}

// workerSessionID is the session id the worker binds; its delegated children
// have none of their own.
const workerSessionID = "20261203_080000_w0rk3r"

func kanbanWorker() (*workerReport, error) {
	ctx := otelsession.Bind(context.Background(), otelsession.Session{
		Platform: "kanban", ChatID: "worker-chat", SessionID: workerSessionID,
	})
	delegated := otelsession.WithDelegatedChild(ctx, "")
	w := &workerReport{Own: map[string]string{}}
	var err error
	if w.Delegated, err = start(execsession.Command(delegated, os.Args[0], "-test.run=^$"), modeRelay); err != nil {
		return nil, err
	}
	if w.DelegatedPlain, err = start(execsession.Command(delegated, os.Args[0], "-test.run=^$"), modeRelayPlain); err != nil {
		return nil, err
	}
	if w.Sibling, err = start(execsession.Command(ctx, os.Args[0], "-test.run=^$"), modeReport); err != nil {
		return nil, err
	}
	for _, kv := range os.Environ() {
		if name, value, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "HERMES_KANBAN_") || name == execsession.DelegatedChildVar {
			w.Own[name] = value
		}
	}
	w.AsyncDelivery = otelsession.AsyncDeliverySupported(ctx)
	return w, nil
}

// workerRun is what a Kanban dispatcher gives the worker it starts.
var workerRun = map[string]string{
	"HERMES_KANBAN_TASK":           "t_parent",
	"HERMES_KANBAN_RUN_ID":         "18",
	"HERMES_KANBAN_CLAIM_LOCK":     "lock-parent",
	"HERMES_KANBAN_GOAL_MODE":      "1",
	"HERMES_KANBAN_GOAL_MAX_TURNS": "40",
	"HERMES_KANBAN_BOARD":          "default",
	"HERMES_KANBAN_DB":             "/srv/hermes/kanban/default.db",
	"HERMES_KANBAN_WORKSPACE":      "/srv/hermes/workspaces/t_parent",
}

// runWorker starts the worker with the run identity and extra variables in
// its environment and nothing of this test process's session.
func runWorker(t *testing.T, extra ...string) *workerReport {
	t.Helper()
	cmd := exec.CommandContext(testCtx(t), os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "HERMES_") && name != "BAGGAGE" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for name, value := range workerRun {
		cmd.Env = append(cmd.Env, name+"="+value)
	}
	cmd.Env = append(cmd.Env, extra...)
	var w workerReport
	require.NoError(t, run(cmd, modeWorker, &w))
	for _, r := range []*report{w.Delegated, w.DelegatedPlain, w.Sibling} {
		require.NotNil(t, r)
		require.Empty(t, r.Err)
	}
	for _, r := range []*report{w.Delegated, w.DelegatedPlain} {
		require.NotNil(t, r.Grandchild)
		require.Empty(t, r.Grandchild.Err)
	}
	return &w
}

// lineage names every process the worker started, directly or not.
func (w *workerReport) lineage() map[string]*report {
	return map[string]*report{
		"delegated child":                       w.Delegated,
		"its grandchild":                        w.Delegated.Grandchild,
		"delegated child that restores nothing": w.DelegatedPlain,
		"its plain grandchild":                  w.DelegatedPlain.Grandchild,
		"sibling that is not delegated":         w.Sibling,
	}
}

// Point 1: the dispatcher's run identity stays with the worker it was given
// to. No process the worker starts, delegated or not, down to the
// grandchildren, can act on the worker's card; the board's location passes.
func TestKanbanRunIdentityStaysWithTheWorker(t *testing.T) {
	t.Parallel()
	w := runWorker(t)

	for name, value := range workerRun {
		assert.Equal(t, value, w.Own[name], "the worker's own %s is untouched", name)
	}
	assert.False(t, w.AsyncDelivery, "the worker is still a Kanban worker")
	for who, r := range w.lineage() {
		for _, name := range fallback.KanbanRunIdentityVars() {
			assert.NotContains(t, r.Kanban, name, "%s inherited %s", who, name)
		}
		for _, name := range []string{"HERMES_KANBAN_BOARD", "HERMES_KANBAN_DB", "HERMES_KANBAN_WORKSPACE"} {
			assert.Equal(t, workerRun[name], r.Kanban[name], "%s: %s is the board's location", who, name)
		}
	}
}

// Point 2: HERMES_DELEGATED_CHILD_CONTEXT, the original's name, marks the
// delegated child and everything it starts, restored or not, and never the
// worker itself or its sibling that is not delegated.
func TestDelegatedMarkCoversTheLineageAndNothingElse(t *testing.T) {
	t.Parallel()
	require.Equal(t, "HERMES_DELEGATED_CHILD_CONTEXT", execsession.DelegatedChildVar)
	w := runWorker(t)

	for who, r := range w.lineage() {
		if r == w.Sibling {
			continue
		}
		assert.Equal(t, "1", r.Env[execsession.DelegatedChildVar], who)
		assert.True(t, r.Delegated, "%s restores a delegated context", who)
	}
	assert.NotContains(t, w.Sibling.Env, execsession.DelegatedChildVar, "the sibling is not delegated")
	assert.False(t, w.Sibling.Delegated)
	assert.NotContains(t, w.Own, execsession.DelegatedChildVar, "the mark never reaches the worker's own environment")
	_, marked := os.LookupEnv(execsession.DelegatedChildVar)
	assert.False(t, marked, "nor this test process's")

	// A worker that is itself a descendant of the original's delegated child
	// carries the original's board-root mark: every process it starts keeps
	// that value, the sibling too, since the whole lineage is delegated.
	const root = "/srv/hermes/kanban"
	w = runWorker(t, execsession.DelegatedChildVar+"="+root)
	for who, r := range w.lineage() {
		assert.Equal(t, root, r.Env[execsession.DelegatedChildVar], who)
		assert.True(t, r.Delegated, who)
	}
	assert.Equal(t, root, w.Own[execsession.DelegatedChildVar])
}

// Point 3: a delegated child without an id of its own keeps its parent's, as
// the original's delegated_child_context(None) does, down to the grandchild.
func TestDelegatedChildWithoutAnIDKeepsItsParents(t *testing.T) {
	t.Parallel()
	w := runWorker(t)

	for who, r := range map[string]*report{"delegated child": w.Delegated, "its grandchild": w.Delegated.Grandchild} {
		got := r.Fields[otelsession.FieldSessionID.Name()]
		assert.Equal(t, otelsession.Set.String(), got.State, who)
		assert.Equal(t, workerSessionID, got.Value, who)
		assert.Equal(t, workerSessionID, r.Env[otelsession.FieldSessionID.Name()], "%s: HERMES_SESSION_ID", who)
		assert.True(t, r.Delegated, who)
	}
	assert.Equal(t, workerSessionID, w.DelegatedPlain.SessionIDGetenv)
	assert.Equal(t, workerSessionID, w.DelegatedPlain.Grandchild.SessionIDGetenv,
		"a grandchild started by a program that restores nothing reads it from HERMES_SESSION_ID")
}

// Point 4: a cron job's identity reaches the processes of the job, as the
// fields of a session do: in BAGGAGE, for the job's notifications, and in
// the legacy variables, down to the grandchild. A job with no identity of
// its own never passes on one its scheduler's environment holds.
func TestCronJobIdentityReachesTheJobsProcesses(t *testing.T) {
	t.Parallel()
	stale := append(os.Environ(),
		"HERMES_CRON_JOB_ID=stale-job",
		"HERMES_CRON_JOB_ORIGIN_USER_ID=stale-user",
		"HERMES_CRON_JOB_ORIGIN_PLATFORM=stale-platform",
	)
	scheduler := otelsession.Bind(testCtx(t), otelsession.Session{Platform: "telegram", ChatID: "-100 42", Cron: otelsession.CronOn})
	job := otelsession.WithCronJob(otelsession.Reset(scheduler), otelsession.CronJob{
		ID: "job-7", OriginPlatform: "telegram", OriginUserID: "5512345678",
	})
	want := map[otelsession.Field]string{
		otelsession.FieldCronJobID:             "job-7",
		otelsession.FieldCronJobOriginPlatform: "telegram",
		otelsession.FieldCronJobOriginUserID:   "5512345678",
	}

	cmd := exec.CommandContext(job, os.Args[0], "-test.run=^$")
	cmd.Env = execsession.Environ(job, stale)
	r := child(t, cmd, modeRelay)
	require.Empty(t, r.Err)
	require.NotNil(t, r.Grandchild)
	for _, p := range []*report{r, r.Grandchild} {
		bag, err := baggage.Parse(p.Env["BAGGAGE"])
		require.NoError(t, err)
		for f, v := range want {
			requireSeen(t, p, f, v, otelsession.Set)
			assert.Equal(t, v, bag.Member(f.Key()).Value(), "%s in BAGGAGE", f.Key())
		}
	}

	// The job ends: its identity is cleared, and stays masked.
	done := otelsession.WithCronJob(job, otelsession.CronJob{})
	cmd = exec.CommandContext(done, os.Args[0], "-test.run=^$")
	cmd.Env = execsession.Environ(done, stale)
	r = child(t, cmd, modeReport)
	for f := range want {
		requireSeen(t, r, f, "", otelsession.Cleared)
	}

	// Work with no cron job at all, in this engaged process.
	cmd = exec.CommandContext(scheduler, os.Args[0], "-test.run=^$")
	cmd.Env = execsession.Environ(scheduler, stale)
	r = child(t, cmd, modeReport)
	for f := range want {
		requireAbsent(t, r, f)
	}
}
