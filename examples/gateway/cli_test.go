package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwire/sessionwire/internal/syncbuf"
	sessionprop "github.com/sessionwire/sessionwire/propagation"
)

// cliEnv makes the test binary run main(), so that these tests run the
// gateway as a user does: its flags, its output streams, its exit status.
const cliEnv = "SESSIONWIRE_GATEWAY_CLI"

type cliResult struct {
	code           int
	stdout, stderr string
}

// gateway runs the gateway with args, within limit, and returns what it did.
func gateway(t *testing.T, limit time.Duration, args ...string) cliResult {
	t.Helper()
	return gatewayWithEnv(t, limit, nil, args...)
}

// gatewayWithEnv is gateway with env (NAME=value) added to its environment.
func gatewayWithEnv(t *testing.T, limit time.Duration, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), cliEnv+"=1", "SESSIONWIRE_PROGRESS_EVERY=500ms"), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	require.NoError(t, ctx.Err(), "gateway %v did not end within %v; stderr:\n%s", args, limit, errOut.String())
	return cliResult{code, out.String(), errOut.String()}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	var c config
	fs, _, _ := newFlagSet(&c)
	fs.VisitAll(func(f *flag.Flag) {
		assert.NotEmpty(t, flagExamples[f.Name], "--%s has no example in flagExamples", f.Name)
	})
	for name := range flagExamples {
		assert.NotNil(t, fs.Lookup(name), "flagExamples names --%s, which is not a flag", name)
	}

	for _, arg := range []string{"--help", "-h"} {
		r := gateway(t, 30*time.Second, arg)
		assert.Equal(t, 0, r.code, arg)
		assert.Empty(t, r.stderr, arg)
		fs.VisitAll(func(f *flag.Flag) {
			assert.Contains(t, r.stdout, "  --"+f.Name, arg)
		})
		assert.Equal(t, strings.Count(r.stdout, "\n  --"), strings.Count(r.stdout, "\n      e.g. "), "one example per flag")
		assert.Contains(t, r.stdout, "Exit status")
	}
}

// A command line that makes no sense is refused with a sentence, exit
// status 2, before anything starts.
func TestCommandLineErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "unknown flag --bogus"},
		{[]string{"--messages=abc"}, `invalid value "abc" for flag --messages`},
		{[]string{"--messages"}, "flag needs an argument: --messages"},
		{[]string{"--messages", "600", "stray"}, `unexpected argument "stray"`},
		{[]string{"--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"--timeout", "-5s"}, "--timeout must be positive"},
		{[]string{"--think", "-1ms"}, "--think must be 0s or more"},
		{[]string{"--ack-wait", "0s"}, "--ack-wait must be positive"},
		{[]string{"--messages", "10", "--conversations", "20"}, "--conversations 20 is more than --messages 10"},
		{[]string{"--messages", "0"}, "--messages must be at least 1"},
		{[]string{"--trust", "10.0.0.0/33"}, `"10.0.0.0/33" is not a network prefix`},
		{[]string{"--trust", "10.1.2.3/16"}, "has host bits set"},
		{[]string{"--rate", "-2"}, "--rate must be a positive number"},
		{[]string{"--duration", "5s"}, "give --rate too"},
		{[]string{"--duration", "-5s", "--rate", "3"}, "--duration must be positive"},
		{[]string{"--rate", "10", "--messages", "100"}, "choose one load"},
		{[]string{"--rate", "10", "--duration", "10s", "--timeout", "5s"}, "must be longer than --duration"},
		{[]string{"--role", "janitor"}, "--role must be one of"},
		{[]string{"--messages", "x"}, "invalid value"},
		{[]string{"--grpc-listen", "127.0.0.1:9091"}, "give it with --role load --downstream=grpc"},
		{[]string{"--role", "load", "--nats-url", "nats://127.0.0.1:1", "--grpc-listen", "127.0.0.1:9091"}, "give it with --role load --downstream=grpc"},
		{[]string{"--role", "load", "--nats-url", "nats://127.0.0.1:1", "--downstream=grpc", "--grpc-listen", "9091"}, "--grpc-listen must be host:port"},
		{[]string{"--role", "load", "--nats-url", "nats://127.0.0.1:1", "--downstream=grpc", "--grpc-listen", ":99999"}, "--grpc-listen must be host:port"},
		// A role without the URL it works with would start, and fail every
		// delivery, job or post for ever.
		{[]string{"--role", "router", "--nats-url", "nats://127.0.0.1:1"}, "--role router needs --platform-url, the chat platforms' base URL (such as --platform-url http://"},
		{[]string{"--role", "router", "--nats-url", "nats://127.0.0.1:1", "--platform-url", "load-1:9090/platforms"}, "--platform-url must be an absolute http:// or https:// URL"},
		{[]string{"--role", "worker", "--nats-url", "nats://127.0.0.1:1"}, "--role worker needs --downstream-url, the downstream service's URL (such as --downstream-url http://"},
		{[]string{"--role", "worker", "--nats-url", "nats://127.0.0.1:1", "--downstream-url", "ftp://load-1/downstream"}, "--downstream-url: the downstream URL \"ftp://load-1/downstream\" must start with"},
		{[]string{"--role", "load", "--nats-url", "nats://127.0.0.1:1"}, "--role load needs --ingress-url, the gateway's URL (such as --ingress-url http://"},
		{[]string{"--role", "load", "--nats-url", "nats://127.0.0.1:1", "--ingress-url", "gw-1:8080"}, "--ingress-url must be an absolute http:// or https:// URL"},
	} {
		start := time.Now()
		r := gateway(t, 30*time.Second, tc.args...)
		assert.Equal(t, 2, r.code, "%v", tc.args)
		assert.Contains(t, r.stderr, tc.want, "%v", tc.args)
		assert.Contains(t, r.stderr, "gateway --help", "%v: points to the help", tc.args)
		assert.Empty(t, r.stdout, "%v", tc.args)
		assert.NotContains(t, r.stderr, "NATS at", "%v: nothing was started", tc.args)
		assert.Less(t, time.Since(start), 20*time.Second)
	}
}

// The previous signing key, which a key rotation keeps verifying, is given
// whole or not at all: an id without its secret, a secret without its id, a
// secret too short or the current key's id is a usage error that says what
// to do, and nothing starts.
func TestPreviousSigningKeyErrors(t *testing.T) {
	role := []string{"--role", "router", "--nats-url", "nats://127.0.0.1:1", "--platform-url", "http://127.0.0.1:1/platforms"}
	secret := strings.Repeat("p", 32)
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"SESSIONWIRE_PREVIOUS_SIGNING_KEY="}, []string{"--previous-signing-key-id", "2026-11"},
			"--previous-signing-key-id 2026-11 names the key the roles signed with before a key rotation, but its secret is not set: " +
				"set SESSIONWIRE_PREVIOUS_SIGNING_KEY"},
		{[]string{"SESSIONWIRE_PREVIOUS_SIGNING_KEY=" + secret}, nil,
			"SESSIONWIRE_PREVIOUS_SIGNING_KEY is set, but not --previous-signing-key-id"},
		{[]string{"SESSIONWIRE_PREVIOUS_SIGNING_KEY=short"}, []string{"--previous-signing-key-id", "2026-11"},
			"the previous signing key (SESSIONWIRE_PREVIOUS_SIGNING_KEY, --previous-signing-key-id 2026-11) is not a key: " +
				"new session verifier: key \"2026-11\": secret of 5 bytes, want at least 32"},
		{[]string{"SESSIONWIRE_PREVIOUS_SIGNING_KEY=" + secret}, []string{"--previous-signing-key-id", "2026/11"},
			"is not a key: new session verifier: key id \"2026/11\": only letters, digits"},
		{[]string{"SESSIONWIRE_PREVIOUS_SIGNING_KEY=" + secret}, []string{"--signing-key-id", "2026-12", "--previous-signing-key-id", "2026-12"},
			"--previous-signing-key-id 2026-12 is the id of the current key too (--signing-key-id)"},
	} {
		args := append(slices.Clone(role), tc.args...)
		r := gatewayWithEnv(t, 30*time.Second, tc.env, args...)
		assert.Equal(t, 2, r.code, "%v %v", tc.env, args)
		assert.Contains(t, r.stderr, tc.want, "%v %v", tc.env, args)
		assert.Contains(t, r.stderr, "gateway --help", "%v %v: points to the help", tc.env, args)
		assert.NotContains(t, r.stderr, "NATS at", "%v %v: nothing was started", tc.env, args)
	}
	// Both, or neither: accepted.
	t.Setenv("SESSIONWIRE_PREVIOUS_SIGNING_KEY", secret)
	c, err := parseFlags(append(slices.Clone(role), "--signing-key-id", "2026-12", "--previous-signing-key-id", "2026-11"))
	require.NoError(t, err)
	assert.Equal(t, []sessionprop.Key{{ID: "2026-11", Secret: []byte(secret)}}, c.previous)
	t.Setenv("SESSIONWIRE_PREVIOUS_SIGNING_KEY", "")
	c, err = parseFlags(role)
	require.NoError(t, err)
	assert.Empty(t, c.previous)
}

// A role started without SESSIONWIRE_SIGNING_KEY signs and verifies with the
// demo key, which is in the source: it says so, once, as it starts, and
// says how to set a real one. With a key set, or for a role process a
// one-process run started itself, it says nothing.
func TestDemoKeyIsWarnedOf(t *testing.T) {
	const warning = "warning: SESSIONWIRE_SIGNING_KEY is not set: sessions are signed and verified with the demo key"
	// A server without JetStream: the role stops right after its start-up.
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	ns.Start()
	defer ns.Shutdown()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	nats := []string{"--nats-url", ns.ClientURL()}
	for _, args := range [][]string{
		append([]string{"--role", "gateway"}, nats...),
		append([]string{"--role", "worker", "--downstream-url", "http://127.0.0.1:1/downstream"}, nats...),
		append([]string{"--role", "router", "--platform-url", "http://127.0.0.1:1/platforms"}, nats...),
	} {
		r := gatewayWithEnv(t, 30*time.Second, []string{"SESSIONWIRE_SIGNING_KEY="}, args...)
		assert.Equal(t, 1, r.code, "%v: NATS has no JetStream", args)
		assert.Equal(t, 1, strings.Count(r.stderr, warning), "%v: one warning\n%s", args, r.stderr)
		assert.Contains(t, r.stderr, args[1]+": "+warning, "%v: from the role", args)
		assert.Contains(t, r.stderr, "Set it to the same random secret of at least 32 bytes for every role "+
			"(such as export SESSIONWIRE_SIGNING_KEY=$(openssl rand -base64 32))", "%v", args)

		r = gatewayWithEnv(t, 30*time.Second, []string{"SESSIONWIRE_SIGNING_KEY=" + strings.Repeat("k", 32)}, args...)
		assert.NotContains(t, r.stderr, warning, "%v: a key is set", args)
		r = gatewayWithEnv(t, 30*time.Second, []string{"SESSIONWIRE_SIGNING_KEY=", childEnv + "=1"}, args...)
		assert.NotContains(t, r.stderr, "warning", "%v: started by a one-process run, the demo", args)
	}
	// The gateway role also says which platforms' posts it cannot check.
	r := gatewayWithEnv(t, 30*time.Second, []string{envTelegramToken + "=", envSlackSecret + "=s", envIngressToken + "="},
		append([]string{"--role", "gateway"}, nats...)...)
	assert.Contains(t, r.stderr, "gateway: warning: posts are not checked for telegram ("+envTelegramToken+
		"), discord and api ("+envIngressToken+"): anyone who can reach the ingress can post as any chat there")
	r = gatewayWithEnv(t, 30*time.Second, []string{envTelegramToken + "=t", envSlackSecret + "=s", envIngressToken + "=b"},
		append([]string{"--role", "gateway"}, nats...)...)
	assert.NotContains(t, r.stderr, "posts are not checked")
	r = gatewayWithEnv(t, 30*time.Second, []string{"SESSIONWIRE_SIGNING_KEY="}, "--role", "router", "--nats-url", "nats://127.0.0.1:1")
	assert.Equal(t, 2, r.code)
	assert.NotContains(t, r.stderr, "warning", "a command line that makes no sense starts nothing, and warns of nothing")
}

// --json: standard output is the summary alone; progress still goes to
// standard error, as plain lines when it is not a terminal.
func TestJSONKeepsStdoutClean(t *testing.T) {
	r := gateway(t, 3*time.Minute, "--messages", "80", "--conversations", "16", "--think", "100ms", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var s summary
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	require.NoError(t, dec.Decode(&s), "stdout is one JSON document:\n%s", r.stdout)
	assert.False(t, dec.More(), "nothing after the JSON summary")
	assert.Equal(t, 80, s.Sent)
	assert.Equal(t, s.Expected, s.Delivered)
	assert.NotContains(t, r.stderr, "\r", "no carriage returns when standard error is not a terminal")
	assert.Contains(t, r.stderr, "progress ", "progress is reported on standard error")
	assert.Regexp(t, `progress +[0-9]+s  (posting: [0-9]+/80 sent|waiting: delivered [0-9]+/[0-9]+)`, r.stderr)
}

// The open loop posts rate × duration messages on schedule and reports the
// latency in full.
func TestOpenLoop(t *testing.T) {
	r := gateway(t, 3*time.Minute, "--rate", "40", "--duration", "2s", "--conversations", "20", "--think", "1ms", "--json")
	require.Contains(t, []int{0, 1}, r.code, r.stderr)
	var s summary
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
	assert.Equal(t, 80, s.Sent)
	require.NotNil(t, s.OpenLoop)
	assert.Equal(t, 40.0, s.OpenLoop.Rate)
	assert.Zero(t, s.Lost+s.Misrouted+s.Duplicates)
	n := 0
	for _, b := range s.Reply.Histogram {
		n += b.Count
	}
	assert.Equal(t, s.Reply.Count, n, "the histogram holds every reply")
	assert.Equal(t, s.Reply.P99ms < 1000 && s.Delivered == s.Expected, s.OpenLoop.Sustained)
	assert.Contains(t, s.String(), "reply latency histogram")
	assert.Contains(t, s.String(), "open loop            40 messages/s offered for 2 s")
}

// A run whose --timeout ends the wait while replies are still arriving
// counts what had not arrived as lost, and says that it may only be late,
// how fast it was arriving, and what --timeout to try.
func TestOutOfTimeIsToldApartFromSilence(t *testing.T) {
	// One in-process worker handling one job at a time, 250 ms each: about
	// four replies a second, for 60 messages (15 s of work), and 5 s to wait
	// for them, long enough for some to arrive on a slow machine.
	r := gateway(t, 3*time.Minute, "--messages", "60", "--conversations", "6", "--workers", "1", "--concurrency", "1",
		"--think", "250ms", "--timeout", "5s", "--json")
	require.Equal(t, 1, r.code, "not everything arrived in time: exit status 1\n%s", r.stderr)
	var s summary
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
	assert.Positive(t, s.Lost)
	assert.Zero(t, s.Misrouted+s.Duplicates)
	require.NotNil(t, s.OutOfTime, "the wait ended at --timeout")
	assert.Equal(t, 5.0, s.OutOfTime.TimeoutSeconds)
	assert.Positive(t, s.OutOfTime.ArrivingPerSecond, "replies were still arriving")
	assert.Less(t, s.OutOfTime.LastArrivalAgoMs, 5000.0)
	assert.Positive(t, s.OutOfTime.RemainingEstimateS)
	text := s.String()
	assert.Contains(t, text, "(not arrived when the 5s --timeout ran out: late or lost, see below)")
	assert.Contains(t, text, "out of time          the 5s --timeout ran out while deliveries were still arriving")
	assert.Regexp(t, `Run again with a\n {21}longer --timeout, such as --timeout [0-9]+m, to tell late from lost\.`, text)
}

func TestOutOfTimeAt(t *testing.T) {
	start := time.Now()
	at := func(sec float64, n int) paceSample {
		return paceSample{start.Add(time.Duration(sec * float64(time.Second))), n}
	}
	// 30 s of samples: slow at first, 5 a second over the last 10 s.
	var pace []paceSample
	for i := 0; i <= 20; i++ {
		pace = append(pace, at(float64(i), i))
	}
	for i := 21; i <= 30; i++ {
		pace = append(pace, at(float64(i), 20+5*(i-20)))
	}
	o := outOfTimeAt(30*time.Second, 400*time.Millisecond, pace, 100)
	assert.InDelta(t, 5.0, o.ArrivingPerSecond, 1e-9, "the pace of the last 10 s")
	assert.Equal(t, 20.0, o.RemainingEstimateS)
	assert.Equal(t, 400.0, o.LastArrivalAgoMs)
	// A wait shorter than 10 s: its whole length.
	o = outOfTimeAt(3*time.Second, 0, []paceSample{at(0, 0), at(1, 2), at(2, 4), at(2.5, 5)}, 7)
	assert.InDelta(t, 2.0, o.ArrivingPerSecond, 1e-9)
	assert.Equal(t, 4.0, o.RemainingEstimateS)
	// Nothing arrived during the wait: no pace, no estimate.
	o = outOfTimeAt(3*time.Second, 3*time.Second, []paceSample{at(0, 9), at(1, 9), at(3, 9)}, 7)
	assert.Zero(t, o.ArrivingPerSecond)
	assert.Zero(t, o.RemainingEstimateS)
	assert.Contains(t, summary{Lost: 7, OutOfTime: o}.String(), "the 3s --timeout ran out 3000 ms after the last delivery")
	assert.Contains(t, summary{Lost: 7, OutOfTime: o}.String(), "such as --timeout 1m, to tell late from lost")
	// Too few samples for a pace.
	assert.Zero(t, outOfTimeAt(time.Second, 0, []paceSample{at(0, 1)}, 3).ArrivingPerSecond)

	assert.Equal(t, 2, suggestTimeoutMinutes(90*time.Second, 10))
	assert.Equal(t, 4, suggestTimeoutMinutes(90*time.Second, 60))
	assert.Equal(t, 120, suggestTimeoutMinutes(119*time.Minute, 0))
	// Everything arrived: no note, whatever ended the wait.
	assert.NotContains(t, summary{OutOfTime: o}.String(), "out of time")
}

// Runs that kill workers or nodes wait 5 minutes by default, unless
// --timeout says otherwise.
func TestFaultRunsWaitLonger(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 90 * time.Second},
		{[]string{"--chaos"}, 5 * time.Minute},
		{[]string{"--nats-cluster", "3", "--fault", "nats-kill"}, 5 * time.Minute},
		{[]string{"--chaos", "--timeout", "100s"}, 100 * time.Second},
	} {
		c, err := parseFlags(tc.args)
		require.NoError(t, err, "%v", tc.args)
		assert.Equal(t, tc.want, c.timeout, "%v", tc.args)
	}
}

func TestLatencyStats(t *testing.T) {
	ms := []float64{5, 15, 15, 150, 150, 150, 700, 30000}
	s := newLatencyStats(ms)
	assert.Equal(t, 8, s.Count)
	assert.Equal(t, 30000.0, s.MaxMs)
	assert.Equal(t, []hbucket{{0, 10, 1}, {10, 20, 2}, {20, 50, 0}, {50, 100, 0}, {100, 200, 3}, {200, 500, 0},
		{500, 1000, 1}, {1000, 2000, 0}, {2000, 5000, 0}, {5000, 10000, 0}, {10000, 20000, 0}, {20000, 50000, 1}}, s.Histogram)
	text := s.text("")
	assert.Contains(t, text, "100ms – 200ms       3  ########################################")
	assert.Contains(t, newLatencyStats([]float64{60000}).text(""), "50s or more")
	assert.Empty(t, newLatencyStats(nil).Histogram)
	start := time.Now()
	assert.Equal(t, start.Add(2500*time.Millisecond), due(start, 100, 40))
}

// Ctrl-C on a terminal signals the whole foreground process group. The
// gateway alone must take it: it prints what happened so far, stops every
// process it started, and exits 130, without pages of errors.
func TestCtrlCStopsEverything(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--chaos", "--workers", "2", "--messages", "3000", "--think", "50ms")
	cmd.Env = append(os.Environ(), cliEnv+"=1", "SESSIONWIRE_PROGRESS_EVERY=500ms")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a process group, as a shell's job
	var out bytes.Buffer
	cmd.Stdout = &out
	errPipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	var stderr []string
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// Wait until the load is being delivered, with the workers running.
	deadline := time.After(2 * time.Minute)
wait:
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the gateway ended early:\n%s", strings.Join(stderr, "\n"))
			stderr = append(stderr, l)
			if strings.Contains(l, "delivered") && !strings.Contains(l, "delivered 0/") {
				break wait
			}
		case <-deadline:
			t.Fatalf("no delivery within 2 minutes:\n%s", strings.Join(stderr, "\n"))
		}
	}
	family := descendants(cmd.Process.Pid)
	require.NotEmpty(t, family, "the worker processes")
	before := len(stderr)                                              // what a loaded machine printed before is not the Ctrl-C's
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)) // what a terminal does
	done := make(chan error, 1)
	go func() {
		for l := range lines {
			stderr = append(stderr, l)
		}
		done <- cmd.Wait()
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the gateway did not stop within a minute of Ctrl-C:\n%s", strings.Join(stderr, "\n"))
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 130, exit.ExitCode())
	assert.Contains(t, out.String(), "interrupted          the run was stopped before it finished")
	assert.Contains(t, out.String(), "messages sent        3000")
	var noise []string
	for _, l := range stderr[before:] {
		if !strings.HasPrefix(l, "progress ") && !strings.HasPrefix(l, "gateway: 3000 messages") && !strings.HasPrefix(l, "chaos: ") {
			noise = append(noise, l)
		}
	}
	assert.LessOrEqual(t, len(noise), 3, "Ctrl-C printed more than a few lines of errors:\n%s", strings.Join(noise, "\n"))
	// Every process the gateway started has ended.
	gone := func() bool {
		for _, pid := range family {
			if alive(pid) {
				return false
			}
		}
		return true
	}
	assert.Eventually(t, gone, 3*time.Second, 100*time.Millisecond, "processes left running after the gateway exited: %v", family)
}

// descendants lists the processes below pid (Linux /proc).
func descendants(pid int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		p, _ := strconv.Atoi(strings.Fields(s)[0])
		pp, _ := strconv.Atoi(fields[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// alive reports whether pid is a running process (a zombie has ended).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

// The load role's gRPC downstream listens where --grpc-listen says, else on
// the host of --listen at a free port.
func TestGRPCListenAddr(t *testing.T) {
	assert.Equal(t, "0.0.0.0:9091", grpcListenAddr("0.0.0.0:9090", "0.0.0.0:9091"))
	assert.Equal(t, "10.1.0.5:0", grpcListenAddr("10.1.0.5:9090", ""))
	assert.Equal(t, "127.0.0.1:0", grpcListenAddr("nonsense", ""))
}

// A NATS server started without JetStream answers none of its API: the
// role says so, and what to turn on, instead of "no responders".
func TestARoleOnNATSWithoutJetStream(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	ns.Start()
	defer ns.Shutdown()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	r := gateway(t, time.Minute, "--role", "gateway", "--nats-url", ns.ClientURL(), "--listen", "127.0.0.1:0")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "is JetStream enabled on the NATS server (nats-server -js")
}

// A role started before NATS waits for it, and says so, instead of exiting
// at once: a fleet started together comes up in any order.
func TestARoleWaitsForNATS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	cmd := exec.Command(os.Args[0], "--role", "gateway", "--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", port), "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	var errOut syncbuf.Buffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "no NATS server answers") }, 20*time.Second, 50*time.Millisecond)

	dir := t.TempDir()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	ns.Start()
	defer ns.Shutdown()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "stderr: %s", errOut.String())
	assert.True(t, strings.HasPrefix(line, "ready gateway "), line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
}
