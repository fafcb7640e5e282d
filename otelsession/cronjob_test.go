package otelsession_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/otelsession"
)

var cronJobFields = []otelsession.Field{
	otelsession.FieldCronJobID, otelsession.FieldCronJobOriginUserID, otelsession.FieldCronJobOriginPlatform,
}

func states(ctx context.Context, fs []otelsession.Field) []string {
	var out []string
	for _, f := range fs {
		v, st := otelsession.Lookup(ctx, f)
		out = append(out, st.String()+":"+v)
	}
	return out
}

// A cron job's identity is bound per job run and is not part of the session:
// Bind and Clear leave it, Reset unsets it, as the original's session
// variables leave its cron job variables.
func TestCronJobIdentity(t *testing.T) {
	t.Parallel()
	for _, f := range cronJobFields {
		assert.Equal(t, otelsession.Remote, f.Scope(), "%s travels to the job's notifications", f.Name())
		assert.False(t, f.InSession(), f.Name())
	}
	ctx, _ := envCtx(map[string]string{"HERMES_CRON_JOB_ID": "stale-job"})
	assert.Equal(t, "stale-job", otelsession.Getenv(ctx, "HERMES_CRON_JOB_ID", ""), "Unset falls back")

	job := otelsession.WithCronJob(ctx, otelsession.CronJob{ID: "job-7", OriginPlatform: "telegram", OriginUserID: "u-42"})
	want := []string{"set:job-7", "set:u-42", "set:telegram"}
	assert.Equal(t, want, states(job, cronJobFields))
	assert.Equal(t, "job-7", baggage.FromContext(job).Member("session.cron_job_id").Value())

	bound := otelsession.Bind(job, otelsession.Session{ChatID: "c1", Cron: otelsession.CronOn})
	assert.Equal(t, want, states(bound, cronJobFields), "Bind leaves the job's identity")
	assert.Equal(t, want, states(otelsession.Clear(bound), cronJobFields), "Clear leaves it")
	assert.Equal(t, []string{"unset:", "unset:", "unset:"}, states(otelsession.Reset(bound), cronJobFields), "Reset unsets it")

	done := otelsession.WithCronJob(bound, otelsession.CronJob{})
	assert.Equal(t, []string{"cleared:", "cleared:", "cleared:"}, states(done, cronJobFields))
	assert.Equal(t, "", otelsession.Getenv(done, "HERMES_CRON_JOB_ID", "def"), "a cleared job id masks the stale one")
	assert.Equal(t, "set:c1", states(done, []otelsession.Field{otelsession.FieldChatID})[0], "the session is untouched")

	// A notification the job sends carries its identity to the next hop.
	h := otelprop.MapCarrier{}
	otelprop.Baggage{}.Inject(job, h)
	next := otelprop.Baggage{}.Extract(context.Background(), h)
	assert.Equal(t, want, states(next, cronJobFields))
}

// Not parallel: it reads what is reported to the process-wide otel handler.
func TestCronJobRefusedValueBindsNoPartOfTheJob(t *testing.T) {
	reported.take()
	ctx := otelsession.WithCronJob(context.Background(), otelsession.CronJob{
		ID: "job-7", OriginPlatform: "telegram", OriginUserID: strings.Repeat("u", otelsession.MaxValueBytes+1),
	})
	assert.Equal(t, []string{"cleared:", "cleared:", "cleared:"}, states(ctx, cronJobFields))
	assert.True(t, reported.has(otelsession.ErrValueTooLong))
}

// Concurrent jobs on one scheduler never see each other's identity.
func TestConcurrentCronJobIdentities(t *testing.T) {
	t.Parallel()
	scheduler := otelsession.Bind(context.Background(), otelsession.Session{Platform: "cron"})
	var wg sync.WaitGroup
	errs := make(chan string, 50)
	for i := range 50 {
		wg.Go(func() {
			id := fmt.Sprint("job-", i)
			job := otelsession.WithCronJob(otelsession.Reset(scheduler), otelsession.CronJob{ID: id, OriginPlatform: "discord", OriginUserID: id})
			if got := otelsession.Getenv(job, "HERMES_CRON_JOB_ID", ""); got != id {
				errs <- got
			}
		})
	}
	wg.Wait()
	close(errs)
	for got := range errs {
		t.Errorf("a job saw another job's id %q", got)
	}
}

// A delegated child without an id of its own keeps its parent's, as the
// original's delegated_child_context(None) does; neither writes the process
// environment.
func TestDelegatedChildWithoutAnID(t *testing.T) {
	t.Parallel()
	ctx, env := envCtx(map[string]string{fallback.SessionIDVar: "old"})
	root := otelsession.WithSessionID(ctx, "parent-1")

	child := otelsession.WithDelegatedChild(root, "")
	v, st := otelsession.Lookup(child, otelsession.FieldSessionID)
	assert.Equal(t, otelsession.Set, st)
	assert.Equal(t, "parent-1", v)
	assert.True(t, otelsession.IsDelegatedChild(child))

	cleared := otelsession.WithSessionID(child, "")
	_, st = otelsession.Lookup(cleared, otelsession.FieldSessionID)
	assert.Equal(t, otelsession.Cleared, st, "a child's id is cleared with WithSessionID")
	assert.Equal(t, "parent-1", env.Getenv(fallback.SessionIDVar), "and that is never mirrored")

	unbound := otelsession.WithDelegatedChild(ctx, "")
	_, st = otelsession.Lookup(unbound, otelsession.FieldSessionID)
	assert.Equal(t, otelsession.Unset, st, "a parent with no id gives its child none")
}
