package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The same load with the downstream service reached over gRPC: every
// notification goes home, and every call the downstream service answered
// carried an accepted session (signed by the gateway, sent by the worker's
// client interceptors, judged by the server's), whose thread is the one of
// the job's conversation. Conversations without a thread answer "" with or
// without a session, hence the count of calls with a session.
func TestDownstreamOverGRPC(t *testing.T) {
	c := testConfig(t, "--downstream", "grpc", "--messages", "300")
	top, err := startTopology(t.Context(), c)
	require.NoError(t, err)
	defer top.stop()
	require.NotNil(t, top.grpcDown)
	require.Contains(t, top.cfg.downstreamURL, "grpc://127.0.0.1:")
	s, err := top.drive(t.Context(), c.seed, nil)
	require.NoError(t, err)
	t.Logf("\n%s", s)

	assert.Equal(t, 300, s.Sent)
	assert.Zero(t, s.Misrouted)
	assert.Zero(t, s.Lost)
	assert.Zero(t, s.Duplicates)
	assert.Equal(t, s.Expected, s.Delivered)
	assert.Zero(t, s.DownstreamMismatch, "the downstream service saw another conversation's thread")
	calls, sessions := top.grpcDown.calls.Load(), top.grpcDown.sessions.Load()
	counts := top.grpcDown.inbound.Counts()
	t.Logf("gRPC downstream: %d calls, %d with a session; policy %+v", calls, sessions, counts)
	// A job can be worked twice (redelivered after the ack wait), never less than once.
	assert.GreaterOrEqual(t, calls, int64(s.Sent))
	assert.Equal(t, calls, sessions, "calls without an accepted session")
	assert.Equal(t, uint64(calls), counts.Accepted)
	assert.Zero(t, counts.Untrusted+counts.Rejected)
}

// Without a session (--session-store off: routing from the job body, the
// workers send trace context only) the same gRPC downstream service gets
// calls without one: the counts above can fail.
func TestDownstreamOverGRPCWithoutSession(t *testing.T) {
	c := testConfig(t, "--downstream", "grpc", "--session-store", "off", "--messages", "30", "--conversations", "10")
	top, err := startTopology(t.Context(), c)
	require.NoError(t, err)
	defer top.stop()
	s, err := top.drive(t.Context(), c.seed, nil)
	require.NoError(t, err)
	assert.Zero(t, s.Lost)
	assert.Positive(t, top.grpcDown.calls.Load())
	assert.Zero(t, top.grpcDown.sessions.Load())
	assert.Positive(t, s.DownstreamMismatch, "threads the downstream service could not see")
}

func TestDownstreamFlag(t *testing.T) {
	for _, ok := range []string{"http", "grpc"} {
		c, err := parseFlags([]string{"--downstream", ok})
		require.NoError(t, err)
		assert.Equal(t, ok, c.downstream)
	}
	c, err := parseFlags(nil)
	require.NoError(t, err)
	assert.Equal(t, downstreamHTTP, c.downstream, "HTTP stays the default")
	_, err = parseFlags([]string{"--downstream", "GRPC "})
	assert.ErrorContains(t, err, "--downstream must be http or grpc")
	out, _, err := hop(c.key, c.layout.wait())
	require.NoError(t, err)
	for _, u := range []string{"grpc://127.0.0.1:1/path", "ftp://127.0.0.1:1", "127.0.0.1:1"} {
		_, err := newWorker(workerConfig{store: storeBaggage, downstreamURL: u, out: out}, nil, nil)
		assert.Error(t, err, u)
	}
}
