package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"

	"github.com/sessionwire/sessionwire/otelsession"
)

func noEnv(string) (string, bool) { return "", false }

func TestMain(m *testing.M) {
	// As main does: refusals are the output, not log lines.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	os.Exit(m.Run())
}

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

func runCtl(t *testing.T, lookup func(string) (string, bool), args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut, lookup)
	return code, out.String(), errOut.String()
}

func TestHelpDocumentsExitStatus(t *testing.T) {
	code, out, _ := runCtl(t, noEnv, "--help")
	require.Equal(t, exitYes, code)
	for _, want := range []string{"header", "env", "verify", "fields", "Exit status", "0  yes", "1  no", "2  the command line is wrong"} {
		assert.Contains(t, out, want)
	}
	for _, cmd := range []string{"header", "env", "verify", "fields"} {
		code, out, _ := runCtl(t, noEnv, cmd, "--help")
		assert.Equal(t, exitYes, code, cmd)
		assert.Contains(t, out, "usage: sessionctl", cmd)
		assert.Contains(t, out, "sessionctl "+cmd, "%s: an example", cmd)
	}
}

// Nothing that is not a session the policy accepts is ever reported as
// accepted, and every such verdict exits 1.
func TestVerdictsAreHonest(t *testing.T) {
	for _, tc := range []struct {
		name, line, verdict string
		code                int
	}{
		{"not baggage", "hello world", verdictNotBaggage, exitNo},
		{"empty header", "", verdictNoSession, exitNo},
		{"blank header", "   ", verdictNoSession, exitNo},
		{"no session member", "tenant=acme", verdictNoSession, exitNo},
		{"refused: local field", "session.chat_id=1,session.cwd=/etc", verdictRefused, exitNo},
		{"refused: unknown session key", "session.chat_idd=1", verdictRefused, exitNo},
		{"refused: identity value too long", "session.platform=" + strings.Repeat("x", 65), verdictRefused, exitNo},
		{"accepted", "session.platform=telegram,session.chat_id=1", verdictAccepted, exitYes},
		{"accepted beside a member the parser skips", "session.chat_id=1,bad member", verdictAccepted, exitYes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, _ := runCtl(t, noEnv, "--json", "header", tc.line)
			assert.Equal(t, tc.code, code)
			var r report
			require.NoError(t, json.Unmarshal([]byte(out), &r))
			assert.Equal(t, tc.verdict, r.Verdict)
			assert.Equal(t, tc.verdict == verdictAccepted, r.Accepted)
			if !r.Accepted {
				assert.NotEmpty(t, r.Problems, "a verdict other than accepted says why")
			}
			_, text, _ := runCtl(t, noEnv, "header", tc.line)
			if tc.verdict == verdictAccepted {
				assert.Contains(t, text, "inbound policy: accepted")
			} else {
				assert.NotContains(t, text, "accepted (")
				assert.Contains(t, text, "not accepted")
			}
		})
	}
}

func TestEnvShowsEffectiveValues(t *testing.T) {
	env := map[string]string{
		"BAGGAGE":                  "session.chat_id=7,session.thread_id=%00",
		"HERMES_SESSION_CHAT_ID":   "8",  // overridden by BAGGAGE
		"HERMES_SESSION_THREAD_ID": "99", // Cleared in BAGGAGE: no fallback
		"HERMES_SESSION_USER_ID":   "u9", // Unset in BAGGAGE: the fallback
		"HERMES_UI_SESSION_ID":     "ui-1",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code, out, _ := runCtl(t, lookup, "--json", "env")
	require.Equal(t, exitYes, code)
	var r report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	byKey := map[string]fieldReport{}
	for _, f := range r.Fields {
		byKey[f.Key] = f
	}
	eff := func(key string) (string, string) {
		f := byKey[key]
		if f.Effective == nil {
			return "<nil>", f.EffectiveSource
		}
		return *f.Effective, f.EffectiveSource
	}
	check := func(key, value, source string) {
		t.Helper()
		v, s := eff(key)
		assert.Equal(t, value, v, key)
		assert.Equal(t, source, s, key)
	}
	check("session.chat_id", "7", "baggage")
	check("session.thread_id", "", "baggage")
	check("session.user_id", "u9", "environment")
	check("session.ui_session_id", "ui-1", "environment")
	check("session.platform", "<nil>", "none")
	assert.Equal(t, "HERMES_SESSION_USER_ID", byKey["session.user_id"].Name, "the legacy name beside the key")

	_, text, _ := runCtl(t, lookup, "env")
	assert.Contains(t, text, "LEGACY VARIABLE")
	assert.Regexp(t, `session\.user_id\s+HERMES_SESSION_USER_ID\s+identity\s+unset\s+"u9"\s+"u9" from environment`, text)

	// A refused BAGGAGE: the receiver sees no session, so every read falls back.
	env["BAGGAGE"] = "session.chat_id=7,session.cwd=/etc"
	code, out, _ = runCtl(t, lookup, "--json", "env")
	assert.Equal(t, exitNo, code)
	r = report{}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	byKey = map[string]fieldReport{}
	for _, f := range r.Fields {
		byKey[f.Key] = f
	}
	assert.Equal(t, verdictRefused, r.Verdict)
	check("session.chat_id", "8", "environment")

	// No BAGGAGE at all: no session to accept, the environment still answers.
	delete(env, "BAGGAGE")
	code, out, _ = runCtl(t, lookup, "--json", "env")
	assert.Equal(t, exitNo, code)
	r = report{}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, verdictNoSession, r.Verdict)
	assert.Contains(t, r.Problems, "there is no BAGGAGE variable")
}

func TestFieldsPrintsEveryRowOfTheTable(t *testing.T) {
	code, out, _ := runCtl(t, noEnv, "--json", "fields")
	require.Equal(t, exitYes, code)
	var rows []fieldRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	specs := otelsession.Specs()
	require.Len(t, rows, len(specs))
	for i, s := range specs {
		assert.Equal(t, s.Key, rows[i].Key)
		assert.Equal(t, s.Env, rows[i].Legacy)
		assert.Equal(t, s.MaxLen, rows[i].MaxBytes)
	}
	code, text, _ := runCtl(t, noEnv, "fields")
	require.Equal(t, exitYes, code)
	assert.Regexp(t, `session\.user_name\s+HERMES_SESSION_USER_NAME\s+display\s+256\s+yes\s+hash\s+yes`, text)
	assert.Regexp(t, `session\.sig\s+-\s+control\s+128\s+no\s+copy\s+no`, text)
	assert.Equal(t, exitUsage, run([]string{"fields", "extra"}, &bytes.Buffer{}, &bytes.Buffer{}, noEnv))
}

// The README's wire-key table is the output of `sessionctl fields --markdown`:
// one source, the code's table.
func TestREADMETableIsGenerated(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	const begin, end = "<!-- sessionctl fields --markdown: begin -->\n", "<!-- sessionctl fields --markdown: end -->"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	require.True(t, i >= 0 && j > i, "README.md has the table between %q and %q", begin, end)
	assert.Equal(t, fieldsMarkdown(), s[i+len(begin):j],
		"README.md's wire-key table differs from the code's: replace it with the output of `go run ./examples/sessionctl fields --markdown`")
}

// A header line pasted with its name ("baggage:", as curl -v prints it) is
// judged by its value: the name does not swallow the first member.
func TestHeaderNameIsNotAMember(t *testing.T) {
	for _, line := range []string{"baggage: session.platform=x,session.chat_id=1", "< Baggage:session.platform=x,session.chat_id=1"} {
		code, out, _ := runCtl(t, noEnv, "--json", "header", line)
		require.Equal(t, exitYes, code, line)
		var r report
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		for _, f := range r.Fields {
			if f.Key == "session.platform" {
				assert.Equal(t, "set", f.State, line)
			}
		}
		assert.Len(t, r.Notes, 1, line)
		assert.Empty(t, r.Warnings, line)
	}
}

// "-" reads the lines from standard input: every non-empty one is judged,
// and input that holds none, or more than any header could, is refused as
// a wrong command line.
func TestHeaderReadsStandardInput(t *testing.T) {
	var out, errOut bytes.Buffer
	code := runWith([]string{"header", "-"}, strings.NewReader("session.platform=x\n\n  \nsession.chat_id=1\r\n"), &out, &errOut, noEnv)
	require.Equal(t, exitYes, code, errOut.String())
	assert.Contains(t, out.String(), "inbound policy: accepted")
	for _, in := range []string{"", "\n \n", strings.Repeat("a", maxInput+1)} {
		out.Reset()
		errOut.Reset()
		assert.Equal(t, exitUsage, runWith([]string{"header", "-"}, strings.NewReader(in), &out, &errOut, noEnv), "%.20q", in)
		assert.Contains(t, errOut.String(), "standard input", "%.20q", in)
		assert.Empty(t, out.String())
	}
}
