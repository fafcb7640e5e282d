package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwire/sessionwire/otelsession"
)

func noEnv(string) (string, bool) { return "", false }

func TestHeader(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"--json", "header", "session.platform=telegram,session.thread_id=%00,tenant=acme"}, &out, &errOut, noEnv)
	require.Equal(t, 0, code, errOut.String())
	var r report
	require.NoError(t, json.Unmarshal(out.Bytes(), &r))
	assert.True(t, r.Accepted)
	assert.Equal(t, []string{"tenant"}, r.Foreign)
	states := map[string]string{}
	for _, f := range r.Fields {
		states[f.Key] = f.State
	}
	assert.Equal(t, "set", states["session.platform"])
	assert.Equal(t, "cleared", states["session.thread_id"])
	assert.Equal(t, "unset", states["session.chat_id"])
	assert.Len(t, r.Fields, len(otelsession.Fields()), "every field of the schema is shown")
}

func TestHeaderShowsACronJobsIdentity(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"--json", "header", "session.cron_job_id=job-7,session.cron_job_origin_platform=telegram,session.cron_job_origin_user_id=%00"}, &out, &errOut, noEnv)
	require.Equal(t, 0, code, errOut.String())
	var r report
	require.NoError(t, json.Unmarshal(out.Bytes(), &r))
	states := map[string]string{}
	for _, f := range r.Fields {
		states[f.Key] = f.State
	}
	assert.Equal(t, "set", states["session.cron_job_id"])
	assert.Equal(t, "set", states["session.cron_job_origin_platform"])
	assert.Equal(t, "cleared", states["session.cron_job_origin_user_id"])
}

func TestHeaderRefused(t *testing.T) {
	var out bytes.Buffer
	code := run([]string{"header", "session.chat_id=1,session.ui_session_id=x", "session.chat_id=2"}, &out, &bytes.Buffer{}, noEnv)
	assert.Equal(t, 1, code)
	assert.Contains(t, out.String(), "refused")
	assert.Contains(t, out.String(), "session.chat_id: session member repeated")
	assert.Contains(t, out.String(), "session.ui_session_id: local session field received from a peer")
	assert.Contains(t, out.String(), `"x"`, "a forged local member is shown")
}

func TestEnv(t *testing.T) {
	env := map[string]string{"BAGGAGE": "session.chat_id=7,session.thread_id=%00", "HERMES_SESSION_CHAT_ID": "8", "HERMES_SESSION_THREAD_ID": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var out bytes.Buffer
	code := run([]string{"--json", "env"}, &out, &bytes.Buffer{}, lookup)
	require.Equal(t, 0, code)
	var r report
	require.NoError(t, json.Unmarshal(out.Bytes(), &r))
	assert.Equal(t, []string{"session.chat_id: the environment variable HERMES_SESSION_CHAT_ID disagrees with BAGGAGE"}, r.Warnings)
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"header"}, {"nope"}, {"env", "a", "b"}, {"--bogus"}} {
		var errOut bytes.Buffer
		assert.Equal(t, 2, run(args, &bytes.Buffer{}, &errOut, noEnv), "%v", args)
		assert.NotEmpty(t, errOut.String(), "%v", args)
	}
}
