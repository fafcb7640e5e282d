package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sessionwire/sessionwire/internal/rabbitmqtest"
)

// pkgs are the benchmark runs of each round, one process each: a package's
// directory, the -test.bench pattern run in it, and the -test.benchtime of
// that run when it is not the -benchtime flag's. A package may be run
// several times a round (its binary is compiled once): the whole calls
// through gRPC and the brokers run each row or package on its own, with a
// fixed count of messages, as the README's loops for them did.
var pkgs = []struct{ dir, bench, benchtime string }{
	{"otelsession", "^Benchmark(Bind|SnapshotAndReset)$", ""},
	{"otelsession", "^BenchmarkLookup$", readBenchtime},
	{"otelsession/sessiontrace", "^Benchmark(SpanStart|LogRecord|OTelLogRecord)$", ""},
	{"propagation", "^Benchmark(OutboundInject|Signature)$", ""},
	{"propagation/httpsession", ".", ""},
	{"propagation/natssession", ".", ""},
	{"propagation/kafkasession", "^Benchmark(Inject|Extract)$", ""},
	{"propagation/kafkasession", "^BenchmarkBroker$", brokerBenchtime},
	{"propagation/amqpsession", "^Benchmark(Inject|Extract)$", ""},
	{"propagation/amqpsession", "^BenchmarkBroker$", brokerBenchtime},
	{"propagation/execsession", "^BenchmarkEnviron$/^Environ", ""},
	{"propagation/grpcsession", "^BenchmarkSteps$/^(server|server_foreign_baggage|server_foreign_baggage_first_seen|client)$", ""},
	// One process per row, so that no row runs in the heap or beside the
	// connections another row left.
	{"propagation/grpcsession", "^BenchmarkUnary$/^otelgrpc/off$", unaryBenchtime},
	{"propagation/grpcsession", "^BenchmarkUnary$/^otelgrpc/on$", unaryBenchtime},
	{"propagation/grpcsession", "^BenchmarkUnary$/^otelgrpc/app$", unaryBenchtime},
	{"propagation/grpcsession", "^BenchmarkUnary$/^grpcsession/app/edge$", unaryBenchtime},
	{"propagation/grpcsession", "^BenchmarkUnary$/^grpcsession/off/otelgrpc-w3c-too$", unaryBenchtime},
	{"propagation/grpcsession", "^BenchmarkUnary$/^grpcsession/off/edge$", unaryBenchtime},
	{"propagation/grpcsession", "^BenchmarkUnary$/^grpcsession/on/otelgrpc-w3c-too$", unaryBenchtime},
	{"propagation/grpcsession", "^BenchmarkUnary$/^grpcsession/on/otelgrpc-except-baggage$", unaryBenchtime},
	{"propagation/grpcsession", "^BenchmarkUnary$/^grpcsession/on/edge$", unaryBenchtime},
	{"propagation/grpcsession", "^BenchmarkUnary$/^grpcsession/signed$", unaryBenchtime},
}

// brokerBenchtime is the messages each path sends through a broker per
// round: all produced, then all consumed, so a count, not a duration.
// unaryBenchtime is the gRPC calls of each row per round. readBenchtime is
// the time of each read row (Lookup, Getenv, a bare member read: about 40
// ns, a few ns from their target) per round: in 0.2 s a moment of another
// process's work moved one round's ratio by up to 10 points; in 1 s such
// moments average out (on a quiet machine, six runs of the foreign Lookup
// read 1.06 to 1.10 at 0.2 s, and five of six 1.07 to 1.09 at 1 s).
const (
	brokerBenchtime = "3000x"
	unaryBenchtime  = "5000x"
	readBenchtime   = "1s"
)

// isBrokerRun reports whether a run of pkgs goes through a broker (Kafka's
// in-process kfake, or a real RabbitMQ), which -brokers=false leaves out
// with the table that reads them.
func isBrokerRun(bench string) bool { return bench == "^BenchmarkBroker$" }

// pythonBench is measured beside the packages, in the same rounds: the
// Python original's bind and read, which prints Go benchmark lines. Its
// results are keyed by the package "python", and only the table "python"
// reads them.
const pythonBench = "internal/cmd/perftables/python/original_bench.py"

// A row is one operation beside its baseline; names are benchmark names
// without the -GOMAXPROCS suffix. The baseline is in the row's package
// unless basePkg names another.
type row struct {
	label, pkg, name, base string
	basePkg                string
}

// How a table compares a row with its baseline.
const (
	ratio = iota // 1.05×
	pct          // +8%
	delta        // +0.6 µs
)

type table struct {
	id, baseHeader string
	compare        int
	rows           []row
	// wall adds a column of wall time beside the CPU time: for a whole
	// call or message, where waiting (the loopback socket, the broker) is
	// part of what a user sees. spread adds the lowest and highest round's
	// comparison to the median: for rows whose rounds scatter far more
	// than a step's do.
	wall, spread bool
}

var tables = []table{
	{id: "core", baseHeader: "OpenTelemetry floor beside it", compare: ratio, rows: []row{
		{"`Bind`, a session bound before (cached)", "otelsession", "BenchmarkBind/sessionwire/Bind", "BenchmarkBind/baseline/baggage.New_prebuilt", ""},
		{"`Bind`, the next message of a conversation (cached, new message id)", "otelsession", "BenchmarkBind/sessionwire/Bind_next_message", "BenchmarkBind/baseline/SetMember_new_message_id", ""},
		{"`Bind`, a session never bound before", "otelsession", "BenchmarkBind/sessionwire/Bind_first_time", "BenchmarkBind/baseline/baggage.New_prebuilt", ""},
		{"`Bind`, a session never bound before, beside building its members too", "otelsession", "BenchmarkBind/sessionwire/Bind_first_time", "BenchmarkBind/baseline/NewMemberRaw_and_New", ""},
		{"`Bind`, the next message of a conversation, beside a full bind cache (about 2.5 MiB live, as in a running gateway)", "otelsession", "BenchmarkBind/sessionwire/Bind_next_message_beside_full_cache", "BenchmarkBind/baseline/SetMember_new_message_id_beside_full_cache", ""},
		{"`Bind` over one member of the application's, a session bound before (cached, the member merged: one `SetMember`), beside the `SetMember` floor with a full bind cache", "otelsession", "BenchmarkBind/sessionwire/Bind_over_1_foreign_member", "BenchmarkBind/baseline/SetMember_new_message_id_beside_full_cache", ""},
		{"`Bind` over one member of the application's, a session never bound before", "otelsession", "BenchmarkBind/sessionwire/Bind_over_1_foreign_member_first_time", "BenchmarkBind/baseline/baggage.New_prebuilt", ""},
		{"`Bind` over 5 members of the application's (more than the cache merges: built with them)", "otelsession", "BenchmarkBind/sessionwire/Bind_over_5_foreign_members", "BenchmarkBind/baseline/baggage.New_prebuilt", ""},
		{"baseline: `baggage.New` of the same prebuilt members + `ContextWithBaggage`", "otelsession", "BenchmarkBind/baseline/baggage.New_prebuilt", "", ""},
		{"baseline: `baggage.NewMemberRaw` of the same values, then `baggage.New` + `ContextWithBaggage` (a program without sessionwire)", "otelsession", "BenchmarkBind/baseline/NewMemberRaw_and_New", "", ""},
		{"baseline: `Baggage.SetMember` of a prebuilt message id member + `ContextWithBaggage` (the floor for the next message)", "otelsession", "BenchmarkBind/baseline/SetMember_new_message_id", "", ""},
		{"baseline: the same `SetMember`, beside a full bind cache", "otelsession", "BenchmarkBind/baseline/SetMember_new_message_id_beside_full_cache", "", ""},
		{"baseline: `context.WithValue` of a struct (no propagation at all)", "otelsession", "BenchmarkBind/baseline/context.WithValue_struct", "", ""},
		{"`Lookup`, remote field", "otelsession", "BenchmarkLookup/sessionwire/Lookup", "BenchmarkLookup/baseline/baggage_Member_Value", ""},
		{"`Getenv`, bound field", "otelsession", "BenchmarkLookup/sessionwire/Getenv", "BenchmarkLookup/baseline/baggage_Member_Value", ""},
		{"`Lookup`, remote field, a worker's context (accepted from a message by an inbound policy, under a span)", "otelsession", "BenchmarkLookup/extracted/sessionwire/Lookup", "BenchmarkLookup/extracted/baseline/baggage_Member_Value", ""},
		{"`Getenv`, bound field, a worker's context", "otelsession", "BenchmarkLookup/extracted/sessionwire/Getenv", "BenchmarkLookup/extracted/baseline/baggage_Member_Value", ""},
		{"`Lookup`, remote field, baggage no sessionwire code built or accepted (the stock propagator's extraction, under a span)", "otelsession", "BenchmarkLookup/foreign/sessionwire/Lookup", "BenchmarkLookup/foreign/baseline/baggage_Member_Value", ""},
		{"`Getenv`, bound field, the same context (baggage no sessionwire code built)", "otelsession", "BenchmarkLookup/foreign/sessionwire/Getenv", "BenchmarkLookup/foreign/baseline/baggage_Member_Value", ""},
		{"`Lookup`, local field", "otelsession", "BenchmarkLookup/sessionwire/Lookup_local_field", "", ""},
		{"`Getenv`, Unset (falls back to the environment)", "otelsession", "BenchmarkLookup/sessionwire/Getenv_unset_fallback", "", ""},
		{"baseline: `baggage.FromContext(ctx).Member(k).Value()`", "otelsession", "BenchmarkLookup/baseline/baggage_Member_Value", "", ""},
		{"`FromContext`, every field", "otelsession", "BenchmarkSnapshotAndReset/sessionwire/FromContext", "", ""},
		{"`Reset` of a full session", "otelsession", "BenchmarkSnapshotAndReset/sessionwire/Reset", "", ""},
	}},
	{id: "python", baseHeader: "the Python original beside it", compare: ratio, rows: []row{
		{"the Python original: `set_session_vars`, whole, as the gateway calls it", "python", "BenchmarkPythonOriginal/set_session_vars", "", ""},
		{"the Python original: its 19 `ContextVar.set` calls alone (no call, tokens or cwd)", "python", "BenchmarkPythonOriginal/19_ContextVar_set_alone", "", ""},
		{"the Python original: `get_session_env` of a bound variable", "python", "BenchmarkPythonOriginal/get_session_env", "", ""},
		{"the Python original: `set_session_vars`, beside 512 conversations' sessions kept alive (about 2.2 MiB, as tracemalloc counts it)", "python", "BenchmarkPythonOriginal/set_session_vars_beside_live_heap", "", ""},
		{"`Bind`, a session bound before (cached), beside `set_session_vars`", "otelsession", "BenchmarkBind/sessionwire/Bind", "BenchmarkPythonOriginal/set_session_vars", "python"},
		{"`Bind`, the next message of a conversation, beside `set_session_vars`", "otelsession", "BenchmarkBind/sessionwire/Bind_next_message", "BenchmarkPythonOriginal/set_session_vars", "python"},
		{"`Bind`, the next message of a conversation, beside the 19 `ContextVar.set` alone", "otelsession", "BenchmarkBind/sessionwire/Bind_next_message", "BenchmarkPythonOriginal/19_ContextVar_set_alone", "python"},
		{"`Bind`, the next message of a conversation, beside a full bind cache, beside `set_session_vars` beside 512 live sessions", "otelsession", "BenchmarkBind/sessionwire/Bind_next_message_beside_full_cache", "BenchmarkPythonOriginal/set_session_vars_beside_live_heap", "python"},
		{"`Bind`, a session never bound before, beside `set_session_vars`", "otelsession", "BenchmarkBind/sessionwire/Bind_first_time", "BenchmarkPythonOriginal/set_session_vars", "python"},
		{"`Getenv`, bound field, beside `get_session_env`", "otelsession", "BenchmarkLookup/sessionwire/Getenv", "BenchmarkPythonOriginal/get_session_env", "python"},
		{"`Getenv`, bound field, baggage no sessionwire code built, beside `get_session_env`", "otelsession", "BenchmarkLookup/foreign/sessionwire/Getenv", "BenchmarkPythonOriginal/get_session_env", "python"},
	}},
	{id: "boundary", baseHeader: "raw OpenTelemetry path", compare: pct, rows: []row{
		{"inbound HTTP: `Inbound.Extract` from `HeaderCarrier` (the policy's cache off)", "propagation/httpsession", "BenchmarkInbound/HeaderCarrier/path=session", "BenchmarkInbound/HeaderCarrier/path=raw", ""},
		{"inbound: `Inbound.Extract` from `MapCarrier` (the policy's cache off)", "propagation/httpsession", "BenchmarkInbound/MapCarrier/path=session", "BenchmarkInbound/MapCarrier/path=raw", ""},
		{"inbound: `Inbound.Extract` from `MapCarrier`, 4,096 sessions in turn, each first seen (the cache notes it)", "propagation/httpsession", "BenchmarkInbound/MapCarrier_first_seen/path=session", "BenchmarkInbound/MapCarrier_first_seen/path=raw", ""},
		{"inbound: `Inbound.Extract` from `MapCarrier`, a conversation's next messages (served from the cache)", "propagation/httpsession", "BenchmarkInbound/MapCarrier_next_message/path=session", "BenchmarkInbound/MapCarrier_next_message/path=raw", ""},
		{"inbound HTTP: the whole `httpsession.Handler` step (the policy's cache off)", "propagation/httpsession", "BenchmarkInbound/Handler/path=session", "BenchmarkInbound/Handler/path=raw", ""},
		{"inbound, signed: `Inbound.Extract`, untrusted peer, signature verified", "propagation", "BenchmarkSignature/Extract/signed,verified", "BenchmarkSignature/otel/Extract", ""},
		{"HTTP server, the whole instrumented request: `otelhttp` given `ExceptBaggage` around `Handler` (recommended; the cache off)", "propagation/httpsession", "BenchmarkServerStack/path=session", "BenchmarkServerStack/path=raw", ""},
		{"HTTP server, `otelhttp` given W3C too around `Handler` (baggage parsed twice; the cache off)", "propagation/httpsession", "BenchmarkServerStack/path=session_otelhttp_W3C_too", "BenchmarkServerStack/path=raw", ""},
		{"outbound: `Outbound.Inject`, allowed", "propagation", "BenchmarkOutboundInject/allowed/path=session", "BenchmarkOutboundInject/allowed/path=raw", ""},
		{"outbound: `Outbound.Inject`, a worker's context sent on (the session an inbound policy accepted, under a span)", "propagation", "BenchmarkOutboundInject/forwarded/path=session", "BenchmarkOutboundInject/forwarded/path=raw", ""},
		{"outbound: `Outbound.Inject`, withheld (raw sends the session)", "propagation", "BenchmarkOutboundInject/withheld/path=session", "BenchmarkOutboundInject/withheld/path=raw", ""},
		{"outbound: `Outbound.Inject`, no session in the context", "propagation", "BenchmarkOutboundInject/no_session/path=session", "BenchmarkOutboundInject/no_session/path=raw", ""},
		{"outbound, signed: `Outbound.Inject`, allowed and signed (raw path signing the same bytes)", "propagation", "BenchmarkOutboundInject/signed/path=session", "BenchmarkOutboundInject/signed/path=raw_signed", ""},
		{"… the same beside the unsigned raw path (what signing adds)", "propagation", "BenchmarkOutboundInject/signed/path=session", "BenchmarkOutboundInject/signed/path=raw", ""},
		{"outbound HTTP: `Transport`, destination allowed", "propagation/httpsession", "BenchmarkOutbound/Transport_allowed/path=session", "BenchmarkOutbound/Transport_allowed/path=raw", ""},
		{"outbound HTTP: `Transport`, session withheld", "propagation/httpsession", "BenchmarkOutbound/Transport_withheld/path=session", "BenchmarkOutbound/Transport_withheld/path=raw", ""},
		{"outbound HTTP, signed: `Transport`, allowed and signed (raw path signing the same bytes)", "propagation/httpsession", "BenchmarkOutbound/Transport_signed/path=session", "BenchmarkOutbound/Transport_signed/path=raw_signed", ""},
		{"… the same beside the unsigned raw path (what signing adds)", "propagation/httpsession", "BenchmarkOutbound/Transport_signed/path=session", "BenchmarkOutbound/Transport_signed/path=raw", ""},
		{"HTTP client, the whole instrumented request: `otelhttp` given `ExceptBaggage` around `Transport` (the configuration before the ClientEdge)", "propagation/httpsession", "BenchmarkClientStack/path=session", "BenchmarkClientStack/path=raw", ""},
		{"HTTP client, `otelhttp` given W3C too around `Transport` (baggage written twice)", "propagation/httpsession", "BenchmarkClientStack/path=session_otelhttp_W3C_too", "BenchmarkClientStack/path=raw", ""},
		{"HTTP client, the whole instrumented request: `ClientEdge.Transport` around `otelhttp` given `ClientEdge.Propagator()` (recommended)", "propagation/httpsession", "BenchmarkClientStack/path=client_edge", "BenchmarkClientStack/path=raw", ""},
		{"NATS publish: `Publisher.Inject`", "propagation/natssession", "BenchmarkInject/Publisher.Inject/path=session", "BenchmarkInject/Publisher.Inject/path=raw", ""},
		{"NATS publish, signed for its `Nats-Msg-Id` (raw path signing the same bytes)", "propagation/natssession", "BenchmarkInject/Publisher.Inject_signed/path=session", "BenchmarkInject/Publisher.Inject_signed/path=raw_signed", ""},
		{"… the same beside the unsigned raw path (what signing adds)", "propagation/natssession", "BenchmarkInject/Publisher.Inject_signed/path=session", "BenchmarkInject/Publisher.Inject_signed/path=raw", ""},
		{"NATS consume: `Consumer.Extract` (the policy's cache off)", "propagation/natssession", "BenchmarkExtract/Consumer.Extract/path=session", "BenchmarkExtract/Consumer.Extract/path=raw", ""},
		{"NATS consume, 4,096 conversations in turn, each first seen (the cache notes it)", "propagation/natssession", "BenchmarkExtract/Consumer.Extract_first_seen/path=session", "BenchmarkExtract/Consumer.Extract_first_seen/path=raw", ""},
		{"NATS consume, a conversation's next messages (served from the cache)", "propagation/natssession", "BenchmarkExtract/Consumer.Extract_next_message/path=session", "BenchmarkExtract/Consumer.Extract_next_message/path=raw", ""},
		{"NATS consume, signature verified (the cache off)", "propagation/natssession", "BenchmarkExtract/Consumer.Extract_verified/path=session", "BenchmarkExtract/Consumer.Extract_verified/path=raw", ""},
		{"NATS consume, signature verified, a conversation's next messages, each signed for its own `Nats-Msg-Id` (served from the cache, as the gateway's workers)", "propagation/natssession", "BenchmarkExtract/Consumer.Extract_verified_next_message/path=session", "BenchmarkExtract/Consumer.Extract_verified_next_message/path=raw", ""},
		{"Kafka publish: `Publisher.Inject`", "propagation/kafkasession", "BenchmarkInject/Publisher.Inject/path=session", "BenchmarkInject/Publisher.Inject/path=raw", ""},
		{"Kafka consume: `Consumer.Extract` (the policy's cache off)", "propagation/kafkasession", "BenchmarkExtract/Consumer.Extract/path=session", "BenchmarkExtract/Consumer.Extract/path=raw", ""},
		{"AMQP publish: `Publisher.Inject`", "propagation/amqpsession", "BenchmarkInject/Publisher.Inject/path=session", "BenchmarkInject/Publisher.Inject/path=raw", ""},
		{"AMQP consume: `Consumer.Extract` (the policy's cache off)", "propagation/amqpsession", "BenchmarkExtract/Consumer.Extract/path=session", "BenchmarkExtract/Consumer.Extract/path=raw", ""},
		{"gRPC server: `otelgrpc` given `ExceptBaggage` + the inbound policy (the cache off)", "propagation/grpcsession", "BenchmarkSteps/server/otelgrpc_except_baggage+policy", "BenchmarkSteps/server/otelgrpc", ""},
		{"gRPC server, `otelgrpc` given W3C too (baggage parsed twice; the cache off)", "propagation/grpcsession", "BenchmarkSteps/server/otelgrpc_given_W3C_too+policy", "BenchmarkSteps/server/otelgrpc", ""},
		{"gRPC server: `otelgrpc` given `Edge.Propagator()` + the `Edge`'s interceptor (recommended; the cache off)", "propagation/grpcsession", "BenchmarkSteps/server/otelgrpc_given_edge_propagator", "BenchmarkSteps/server/otelgrpc", ""},
		{"gRPC server, a call carrying only the application's own baggage: the `Edge` (recommended; the cache off)", "propagation/grpcsession", "BenchmarkSteps/server_foreign_baggage/otelgrpc_given_edge_propagator", "BenchmarkSteps/server_foreign_baggage/otelgrpc", ""},
		{"gRPC server, the application's own baggage, 4,096 calls in turn, each line of its own (first seen: the cache notes it)", "propagation/grpcsession", "BenchmarkSteps/server_foreign_baggage_first_seen/otelgrpc_given_edge_propagator", "BenchmarkSteps/server_foreign_baggage_first_seen/otelgrpc", ""},
		{"gRPC server, the application's own baggage, the same line again (served from the cache)", "propagation/grpcsession", "BenchmarkSteps/server_foreign_baggage/otelgrpc_given_edge_propagator_cached", "BenchmarkSteps/server_foreign_baggage/otelgrpc", ""},
		{"gRPC client: `otelgrpc` given `ExceptBaggage` + the outbound policy", "propagation/grpcsession", "BenchmarkSteps/client/otelgrpc_except_baggage+policy", "BenchmarkSteps/client/otelgrpc", ""},
		{"gRPC client, `otelgrpc` given W3C too (baggage written twice)", "propagation/grpcsession", "BenchmarkSteps/client/otelgrpc_given_W3C_too+policy", "BenchmarkSteps/client/otelgrpc", ""},
		{"gRPC client: `otelgrpc` given `Edge.Propagator()` + the `Edge`'s interceptor (recommended)", "propagation/grpcsession", "BenchmarkSteps/client/otelgrpc_given_edge_propagator", "BenchmarkSteps/client/otelgrpc", ""},
		{"child environment: `execsession.Environ` (raw path writing the same legacy variables)", "propagation/execsession", "BenchmarkEnviron/Environ/path=session", "BenchmarkEnviron/Environ/path=raw_with_vars", ""},
		{"… the same beside the raw path without them (what the legacy variables add)", "propagation/execsession", "BenchmarkEnviron/Environ/path=session", "BenchmarkEnviron/Environ/path=raw", ""},
		{"child environment, signed (raw path signing the same bytes)", "propagation/execsession", "BenchmarkEnviron/Environ_signed/path=session", "BenchmarkEnviron/Environ_signed/path=raw_signed", ""},
		{"… the same beside the unsigned raw path (what signing adds)", "propagation/execsession", "BenchmarkEnviron/Environ_signed/path=session", "BenchmarkEnviron/Environ_signed/path=raw", ""},
	}},
	{id: "signing", baseHeader: "stock `propagation.Baggage{}.Extract`", compare: delta, rows: []row{
		{"stock `propagation.Baggage{}.Extract` (baseline)", "propagation", "BenchmarkSignature/otel/Extract", "", ""},
		{"`Inbound.Extract`, trusted peer, unsigned", "propagation", "BenchmarkSignature/Extract/unsigned", "BenchmarkSignature/otel/Extract", ""},
		{"`Inbound.Extract`, trusted peer, signature carried, not checked", "propagation", "BenchmarkSignature/Extract/signed,unverified", "BenchmarkSignature/otel/Extract", ""},
		{"`Inbound.Extract`, untrusted peer, signature verified", "propagation", "BenchmarkSignature/Extract/signed,verified", "BenchmarkSignature/otel/Extract", ""},
		{"`Verifier.Verify` alone (reads the members itself)", "propagation", "BenchmarkSignature/Verify", "", ""},
		{"`otelsession.Bind` (what a gateway does just before signing; cached)", "propagation", "BenchmarkSignature/Bind", "", ""},
		{"`Signer.Sign`", "propagation", "BenchmarkSignature/Sign", "", ""},
	}},
	{id: "brokers", baseHeader: "raw path", compare: pct, wall: true, spread: true, rows: []row{
		{"Kafka (franz-go, in-process kfake), raw: trace context only", "propagation/kafkasession", "BenchmarkBroker/path=raw", "", ""},
		{"Kafka, the stock W3C propagators carrying the session as plain baggage", "propagation/kafkasession", "BenchmarkBroker/path=rawbaggage", "BenchmarkBroker/path=raw", ""},
		{"Kafka, `kafkasession` `Publisher`/`Consumer` with the policies", "propagation/kafkasession", "BenchmarkBroker/path=session", "BenchmarkBroker/path=raw", ""},
		{"… the same beside plain baggage (what the policies cost over carrying the session at all)", "propagation/kafkasession", "BenchmarkBroker/path=session", "BenchmarkBroker/path=rawbaggage", ""},
		{"RabbitMQ (amqp091-go, a real broker), raw: trace context only", "propagation/amqpsession", "BenchmarkBroker/path=raw", "", ""},
		{"RabbitMQ, the stock W3C propagators carrying the session as plain baggage", "propagation/amqpsession", "BenchmarkBroker/path=rawbaggage", "BenchmarkBroker/path=raw", ""},
		{"RabbitMQ, `amqpsession` `Publisher`/`Consumer` with the policies", "propagation/amqpsession", "BenchmarkBroker/path=session", "BenchmarkBroker/path=raw", ""},
		{"… the same beside plain baggage", "propagation/amqpsession", "BenchmarkBroker/path=session", "BenchmarkBroker/path=rawbaggage", ""},
	}},
	{id: "grpc", baseHeader: "raw `otelgrpc`", compare: pct, wall: true, spread: true, rows: []row{
		{"raw `otelgrpc`, no session", "propagation/grpcsession", "BenchmarkUnary/otelgrpc/off", "", ""},
		{"raw `otelgrpc`, a full session as plain baggage (the W3C propagators)", "propagation/grpcsession", "BenchmarkUnary/otelgrpc/on", "", ""},
		{"raw `otelgrpc`, only the application's own baggage (three members)", "propagation/grpcsession", "BenchmarkUnary/otelgrpc/app", "", ""},
		{"`grpcsession.Edge`, `otelgrpc` given `Edge.Propagator()` (recommended), no session (beside raw `otelgrpc` without one)", "propagation/grpcsession", "BenchmarkUnary/grpcsession/off/edge", "BenchmarkUnary/otelgrpc/off", ""},
		{"`grpcsession.Edge` (the policy's cache off), only the application's own baggage (beside raw `otelgrpc` with the same)", "propagation/grpcsession", "BenchmarkUnary/grpcsession/app/edge", "BenchmarkUnary/otelgrpc/app", ""},
		{"the interceptors, `otelgrpc` given the W3C propagators too, no session (beside raw `otelgrpc` without one)", "propagation/grpcsession", "BenchmarkUnary/grpcsession/off/otelgrpc-w3c-too", "BenchmarkUnary/otelgrpc/off", ""},
		{"**`grpcsession.Edge`, `otelgrpc` given `Edge.Propagator()`** (recommended), the session checked and accepted", "propagation/grpcsession", "BenchmarkUnary/grpcsession/on/edge", "BenchmarkUnary/otelgrpc/on", ""},
		{"the interceptors, `otelgrpc` given `grpcsession.ExceptBaggage`", "propagation/grpcsession", "BenchmarkUnary/grpcsession/on/otelgrpc-except-baggage", "BenchmarkUnary/otelgrpc/on", ""},
		{"the interceptors, `otelgrpc` given the W3C propagators too (the baggage parsed and written twice)", "propagation/grpcsession", "BenchmarkUnary/grpcsession/on/otelgrpc-w3c-too", "BenchmarkUnary/otelgrpc/on", ""},
		{"the interceptors, `otelgrpc` given the W3C propagators, signed per call, verified", "propagation/grpcsession", "BenchmarkUnary/grpcsession/signed", "BenchmarkUnary/otelgrpc/on", ""},
	}},
	{id: "spans", baseHeader: "span without attributes", compare: delta, rows: []row{
		{"span start + end, no session attributes (baseline)", "otelsession/sessiontrace", "BenchmarkSpanStart/baseline/no_session_attributes", "", ""},
		{"… with `SpanProcessor`, default fields, user id hashed", "otelsession/sessiontrace", "BenchmarkSpanStart/sessiontrace/processor", "BenchmarkSpanStart/baseline/no_session_attributes", ""},
		{"… the same 7 default attributes set by a processor that does nothing else (the SDK's own cost of them)", "otelsession/sessiontrace", "BenchmarkSpanStart/baseline/default_attributes_set_at_start", "BenchmarkSpanStart/baseline/no_session_attributes", ""},
		{"… the same 7 default attributes given at start (`trace.WithAttributes`)", "otelsession/sessiontrace", "BenchmarkSpanStart/baseline/default_attributes_given_at_start", "BenchmarkSpanStart/baseline/no_session_attributes", ""},
		{"… 8 attributes set by a processor that does nothing else (the SDK's cost of one more)", "otelsession/sessiontrace", "BenchmarkSpanStart/baseline/8_attributes_set_at_start", "BenchmarkSpanStart/baseline/no_session_attributes", ""},
		{"… 9 attributes set by a processor that does nothing else (two more)", "otelsession/sessiontrace", "BenchmarkSpanStart/baseline/9_attributes_set_at_start", "BenchmarkSpanStart/baseline/no_session_attributes", ""},
		{"… with `SpanProcessor`, default fields, no hash key", "otelsession/sessiontrace", "BenchmarkSpanStart/sessiontrace/processor_no_key", "BenchmarkSpanStart/baseline/no_session_attributes", ""},
		{"span start + end over 1,024 sessions in turn, no session attributes (baseline)", "otelsession/sessiontrace", "BenchmarkSpanStart/baseline/no_session_attributes_1024_sessions_in_turn", "", ""},
		{"… with `SpanProcessor`, default fields (the first span of each session: nothing remembered)", "otelsession/sessiontrace", "BenchmarkSpanStart/sessiontrace/processor_1024_sessions_in_turn", "BenchmarkSpanStart/baseline/no_session_attributes_1024_sessions_in_turn", ""},
		{"… with `SpanProcessor`, default fields and `ConversationID` (`gen_ai.conversation.id`)", "otelsession/sessiontrace", "BenchmarkSpanStart/sessiontrace/processor_conversation_id", "BenchmarkSpanStart/baseline/no_session_attributes", ""},
		{"… with `SpanProcessor`, every field (`SpanFields: otelsession.Fields()`)", "otelsession/sessiontrace", "BenchmarkSpanStart/sessiontrace/processor_all_fields", "BenchmarkSpanStart/baseline/no_session_attributes", ""},
		{"… the same 20 attributes given at start (the SDK's own cost)", "otelsession/sessiontrace", "BenchmarkSpanStart/baseline/same_attributes_given_at_start", "BenchmarkSpanStart/baseline/no_session_attributes", ""},
	}},
	{id: "logs", baseHeader: "the same record without the session", compare: delta, rows: []row{
		{"`slog` JSON record (baseline)", "otelsession/sessiontrace", "BenchmarkLogRecord/baseline/json_handler", "", ""},
		{"`slog` JSON record through `LogHandler`, every field", "otelsession/sessiontrace", "BenchmarkLogRecord/sessiontrace/log_handler", "BenchmarkLogRecord/baseline/json_handler", ""},
		{"OTel log record (baseline)", "otelsession/sessiontrace", "BenchmarkOTelLogRecord/baseline/no_session_processor", "", ""},
		{"OTel log record with `LogProcessor`, every field", "otelsession/sessiontrace", "BenchmarkOTelLogRecord/sessiontrace/log_processor", "BenchmarkOTelLogRecord/baseline/no_session_processor", ""},
	}},
}

// A target is one of the performance targets of issue 15 and the rows of
// the tables above that it holds, each compared with its own baseline as
// its table compares it: the "targets" table says, from the same run, how
// many are within it and which are not, so that no sentence of the README
// has to.
type target struct {
	label string
	// limit is the highest comparison within the target: a ratio (1.10 is
	// +10%), or for a table of differences, nanoseconds.
	limit float64
	pick  func(tableID string, r row) bool
}

var targets = []target{
	{"`Bind` of a session seen before faster than the Python original's whole bind (beside a small heap, and beside 512 sessions kept alive)", 1, func(id string, r row) bool {
		return id == "python" && strings.HasPrefix(r.base, "BenchmarkPythonOriginal/set_session_vars") && !strings.HasSuffix(r.name, "first_time")
	}},
	{"a first-time `Bind` within 1.1× the `baggage.New` floor", 1.10, func(id string, r row) bool {
		return id == "core" && r.name == "BenchmarkBind/sessionwire/Bind_first_time" && r.base == "BenchmarkBind/baseline/baggage.New_prebuilt"
	}},
	{"`Lookup` and `Getenv` within 1.1× the raw member read (on `Bind`'s context, a worker's, and a baggage no sessionwire code built)", 1.10, func(id string, r row) bool {
		return id == "core" && (strings.HasSuffix(r.name, "/Lookup") || strings.HasSuffix(r.name, "/Getenv")) && strings.HasSuffix(r.base, "/baggage_Member_Value")
	}},
	{"every boundary row within +10% of the raw OpenTelemetry path carrying the same (leaving out the rows that say what signing or the legacy variables add, and the configurations this README advises against: W3C given to `otelhttp`/`otelgrpc` beside the policy)", 1.10, func(id string, r row) bool {
		switch id {
		case "boundary":
			return !strings.HasPrefix(r.label, "…") && !strings.Contains(r.label, "W3C too")
		case "brokers":
			return strings.HasSuffix(r.base, "path=rawbaggage")
		case "grpc":
			return r.base != "" && !strings.HasSuffix(r.name, "otelgrpc-w3c-too") && !strings.HasSuffix(r.name, "signed")
		}
		return false
	}},
	{"the span processor, default fields, at most +1 µs over a bare span", 1000, func(id string, r row) bool {
		return id == "spans" && r.name == "BenchmarkSpanStart/sessiontrace/processor"
	}},
}

// renderTargets is the "targets" table: for each target, how many of its
// rows are within it, and each row that is not, with its comparison.
func renderTargets(results map[string]*result, skip map[string]bool) (string, error) {
	var b strings.Builder
	b.WriteString("| target (issue 15) | rows | within it | over it in this run |\n| --- | ---: | ---: | --- |\n")
	for _, tg := range targets {
		n, within := 0, 0
		var over []string
		for _, t := range tables {
			if skip[t.id] {
				continue
			}
			for _, r := range t.rows {
				if r.base == "" || !tg.pick(t.id, r) {
					continue
				}
				basePkg := r.basePkg
				if basePkg == "" {
					basePkg = r.pkg
				}
				res, base := results[r.pkg+" "+r.name], results[basePkg+" "+r.base]
				if res == nil || base == nil {
					return "", fmt.Errorf("target %q: no result for %s or %s", tg.label, r.name, r.base)
				}
				q, d := pairedRatio(res, base), pairedDelta(res, base)
				n++
				if t.compare == delta && d <= tg.limit || t.compare != delta && q <= tg.limit {
					within++
					continue
				}
				over = append(over, fmt.Sprintf("%s: %s", strings.ReplaceAll(r.label, "|", "\\|"), compared(t.compare, q, d)))
			}
		}
		if n == 0 {
			return "", fmt.Errorf("target %q holds no row: was a row renamed?", tg.label)
		}
		// One row over the target per line of the cell: labels hold ";".
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", tg.label, n, within, strings.Join(over, "<br>"))
	}
	return b.String(), nil
}

// result is one benchmark's measurements over the rounds.
type result struct {
	ns, cpu, bytes, allocs []float64
	live                   []float64 // live-B: the live heap the loop ran beside
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "perftables:", err)
		os.Exit(1)
	}
}

func run() error {
	rounds := flag.Int("rounds", 7, "rounds: each package's benchmarks run once per round; medians are taken over them")
	benchtime := flag.String("benchtime", "0.2s", "-test.benchtime of every benchmark")
	readme := flag.String("readme", "README.md", "the file whose marked tables are rewritten")
	dry := flag.Bool("n", false, "print the tables; do not rewrite the README")
	rawOut := flag.String("raw", "", "also write every benchmark line to this file (for benchstat)")
	profDir := flag.String("profiles", "", "also record the CPU profiles behind the README's \"where the cost goes\" into this directory")
	profTime := flag.String("profiletime", "4s", "-test.benchtime of each profiled benchmark")
	python := flag.String("python", "python3", "the interpreter that runs the Python original's benchmark; \"\" skips it and leaves its table as it is")
	brokers := flag.Bool("brokers", true, "also send messages through Kafka (in-process) and RabbitMQ (a broker started for the run unless "+rabbitmqtest.URLEnv+" names one); false leaves the broker table as it is")
	from := flag.String("from", "", "render the tables from the benchmark lines an earlier run wrote with -raw, running nothing (the machine line is left as the README has it)")
	heapCheck := flag.Bool("heapcheck", true, "refuse to rewrite the README when a row and its baseline ran beside live heaps the garbage collector paces differently (the mismatches are printed either way)")
	flag.Parse()
	if *rounds < 1 {
		return errors.New("-rounds must be at least 1")
	}
	if _, err := os.Stat("go.mod"); err != nil {
		return errors.New("run it from the repository root (no go.mod here)")
	}
	var results map[string]*result
	var machine string
	if *from != "" {
		data, err := os.ReadFile(*from)
		if err != nil {
			return fmt.Errorf("-from: %w", err)
		}
		if results = parseRaw(data); len(results) == 0 {
			return fmt.Errorf("-from %s holds no benchmark line perftables wrote", *from)
		}
	} else {
		var err error
		if results, machine, err = measure(measureOptions{rounds: *rounds, benchtime: *benchtime, rawOut: *rawOut,
			profDir: *profDir, profTime: *profTime, python: *python, brokers: *brokers}); err != nil {
			return err
		}
	}
	mismatches := heapMismatches(results)
	for _, m := range mismatches {
		fmt.Fprintln(os.Stderr, "perftables:", m)
	}
	blocks := map[string]string{}
	if machine != "" {
		blocks["machine"] = machine + "\n"
	}
	skip := map[string]bool{"python": *python == "", "brokers": !*brokers}
	for _, t := range tables {
		if skip[t.id] {
			continue // left as the README has it
		}
		s, err := render(t, results)
		if err != nil {
			return err
		}
		blocks[t.id] = s
	}
	// Targets whose rows were not run this time are left out of the count:
	// the table says so by its rows column.
	s, err := renderTargets(results, skip)
	if err != nil {
		return err
	}
	blocks["targets"] = s
	if *dry {
		for _, id := range append([]string{"machine", "targets"}, tableIDs()...) {
			if body, ok := blocks[id]; ok {
				fmt.Printf("<!-- perf:%s -->\n%s\n", id, body)
			}
		}
		return nil
	}
	if len(mismatches) > 0 && *heapCheck {
		return fmt.Errorf("README.md left as it is: %d rows ran beside a live heap unlike their baseline's (above); keep alive through both what the benchmark keeps for one of them, or pass -heapcheck=false", len(mismatches))
	}
	return rewrite(*readme, blocks)
}

// measureOptions are the flags that say how measure runs the benchmarks.
type measureOptions struct {
	rounds            int
	benchtime, rawOut string
	profDir, profTime string
	python            string
	brokers           bool
}

// measure compiles the benchmarks and runs them in rounds, and returns
// their results and the description of the machine and the run.
func measure(o measureOptions) (map[string]*result, string, error) {
	if o.python != "" {
		if _, err := exec.LookPath(o.python); err != nil {
			return nil, "", fmt.Errorf("the Python original's benchmark needs %s (install it, or pass -python \"\" to leave its table as it is): %w", o.python, err)
		}
	}
	bin, err := os.MkdirTemp("", "perftables")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(bin)
	compiled := map[string]bool{}
	for _, p := range pkgs {
		if compiled[p.dir] {
			continue
		}
		compiled[p.dir] = true
		fmt.Fprintf(os.Stderr, "compiling %s\n", p.dir)
		cmd := exec.Command("go", "test", "-c", "-o", binPath(bin, p.dir), "./"+p.dir)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, "", fmt.Errorf("compile the benchmarks of %s: %w", p.dir, err)
		}
	}
	// One RabbitMQ broker for the whole run, so that no round pays its
	// start (about 25 s) and every round's messages go through the same
	// broker; the benchmark binaries find it by its URL.
	var env []string
	if o.brokers && os.Getenv(rabbitmqtest.URLEnv) == "" {
		fmt.Fprintln(os.Stderr, "starting a RabbitMQ broker for the broker table")
		broker, err := rabbitmqtest.Start(context.Background())
		if err != nil {
			return nil, "", fmt.Errorf("the broker table needs RabbitMQ (install Debian's rabbitmq-server, set %s to a running broker's URL, or pass -brokers=false to leave the table as it is): %w", rabbitmqtest.URLEnv, err)
		}
		defer func() {
			if err := broker.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "perftables:", err)
			}
		}()
		env = append(os.Environ(), rabbitmqtest.URLEnv+"="+broker.URL)
	}
	machine := describeMachine()
	results := map[string]*result{}
	var raw bytes.Buffer
	start := time.Now()
	for r := 1; r <= o.rounds; r++ {
		for _, p := range pkgs {
			if !o.brokers && isBrokerRun(p.bench) {
				continue
			}
			bt := o.benchtime
			if p.benchtime != "" {
				bt = p.benchtime
			}
			fmt.Fprintf(os.Stderr, "round %d/%d: %s %s\n", r, o.rounds, p.dir, p.bench)
			cmd := exec.Command(binPath(bin, p.dir), "-test.run", "^$", "-test.bench", p.bench,
				"-test.benchmem", "-test.benchtime", bt)
			cmd.Dir = p.dir
			cmd.Env = env // nil: this process's environment
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				return nil, "", fmt.Errorf("benchmarks %s of %s, round %d: %w", p.bench, p.dir, r, err)
			}
			fmt.Fprintf(&raw, "pkg: %s\n", p.dir)
			raw.Write(out)
			parse(p.dir, out, results)
		}
		if o.python != "" {
			fmt.Fprintf(os.Stderr, "round %d/%d: %s\n", r, o.rounds, pythonBench)
			out, err := runScript(o.python, pythonBench, o.benchtime, r)
			if err != nil {
				return nil, "", fmt.Errorf("round %d: %w", r, err)
			}
			fmt.Fprintf(&raw, "pkg: python\n")
			raw.Write(out)
			parse("python", out, results)
		}
	}
	// A benchmark two runs of a round select would pair its rounds with
	// its baseline's wrongly: its samples would be twice as many.
	for key, res := range results {
		if n := max(len(res.ns), len(res.cpu)); n > o.rounds {
			return nil, "", fmt.Errorf("%s ran %d times in %d rounds: more than one of the runs in pkgs selects it (a -test.bench pattern matches the sub-benchmarks of a longer name too)", key, n, o.rounds)
		}
	}
	machine += fmt.Sprintf(", load average %s at the end; %d rounds of -benchtime %s (the reads' rows %s) in %s",
		loadAverage(), o.rounds, o.benchtime, readBenchtime, time.Since(start).Round(time.Second))
	if o.rawOut != "" {
		if err := os.WriteFile(o.rawOut, raw.Bytes(), 0o644); err != nil {
			return nil, "", err
		}
	}
	if o.profDir != "" {
		lines, err := writeProfiles(o.profDir, bin, o.profTime, machine)
		if err != nil {
			return nil, "", err
		}
		for _, l := range lines {
			fmt.Fprintln(os.Stderr, l)
		}
	}
	return results, machine, nil
}

// parseRaw reads what -raw wrote: each package's benchmark lines after a
// "pkg: DIR" line naming one of pkgs' directories (or "python"). The test
// binaries' own "pkg:" lines, with the module's path, are not such lines.
func parseRaw(data []byte) map[string]*result {
	dirs := map[string]bool{"python": true}
	for _, p := range pkgs {
		dirs[p.dir] = true
	}
	results := map[string]*result{}
	var cur string
	var chunk bytes.Buffer
	flush := func() {
		if cur != "" {
			parse(cur, chunk.Bytes(), results)
		}
		chunk.Reset()
	}
	for line := range strings.Lines(string(data)) {
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "pkg: "); ok && dirs[d] {
			flush()
			cur = d
			continue
		}
		chunk.WriteString(line)
	}
	flush()
	return results
}

// markPerByte is about how many bytes the garbage collector marks for each
// byte a loop allocates beside live bytes of live heap, as GOGC=100 paces
// it: a cycle marks what is live, and the next starts once the heap has
// grown by as much, but not before it reaches 4 MiB. Beside a few MiB it is
// about 1; beside an almost empty heap, next to 0.
func markPerByte(live float64) float64 {
	const minHeap = 4 << 20
	return live / (max(minHeap, 2*live) - live)
}

// maxMarkGap is how far apart markPerByte of a row and of its baseline may
// be before their CPU times stop being comparable.
const maxMarkGap = 0.25

// heapMismatches names the rows that ran beside a live heap the collector
// paces unlike their baseline's (markPerByte more than maxMarkGap apart),
// when both allocate: their CPU times then carry unlike shares of garbage
// collection. A benchmark that keeps data alive for some of its rows only
// (contexts built up front, a cache filled by one row) shows here.
func heapMismatches(results map[string]*result) []string {
	var out []string
	for _, t := range tables {
		for _, r := range t.rows {
			if r.base == "" || r.basePkg != "" && r.basePkg != r.pkg {
				continue
			}
			res, base := results[r.pkg+" "+r.name], results[r.pkg+" "+r.base]
			if res == nil || base == nil || len(res.live) == 0 || len(base.live) == 0 ||
				median(res.bytes) < 1 || median(base.bytes) < 1 {
				continue
			}
			a, b := median(res.live), median(base.live)
			if math.Abs(markPerByte(a)-markPerByte(b)) > maxMarkGap {
				out = append(out, fmt.Sprintf("%s %s ran beside %.1f MiB of live heap, its baseline %s beside %.1f MiB: the garbage collector's share of their CPU times differs (about %.2f against %.2f bytes marked per byte allocated)",
					r.pkg, r.name, a/(1<<20), r.base, b/(1<<20), markPerByte(a), markPerByte(b)))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// runScript runs a benchmark script with benchtime as -test.benchtime takes
// it, and returns what it printed. The script's process hashes strings with
// hashSeed (PYTHONHASHSEED): the Python original's bind costs about 40% more
// under some seeds than under most (3 of 30 seeds: 5.5 µs against 3.8 to
// 4.2 µs for the rest, each the same from one process to the next; its
// keyword arguments and variables are dictionaries of strings). A round
// given a random seed would land in either; the measure loop gives round r
// seed r, so that every run measures the original over the same seeds.
func runScript(interpreter, path, benchtime string, hashSeed int) ([]byte, error) {
	args, err := scriptArgs(benchtime)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cmd := exec.Command(interpreter, append([]string{path}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONHASHSEED="+strconv.Itoa(hashSeed))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("run %s %s: %w", interpreter, path, err)
	}
	return out, nil
}

// scriptArgs turns a -test.benchtime value into the benchmark script's flags:
// a duration ("0.2s") into -benchtime in seconds, an iteration count ("100x")
// into -count, as go test reads the two forms.
func scriptArgs(benchtime string) ([]string, error) {
	if count, ok := strings.CutSuffix(benchtime, "x"); ok {
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-benchtime %q: a count of iterations is a whole number of 1 or more before the x, as in 100x", benchtime)
		}
		return []string{"-count", strconv.Itoa(n)}, nil
	}
	d, err := time.ParseDuration(benchtime)
	if err != nil {
		return nil, fmt.Errorf("-benchtime %q is neither a duration (0.2s) nor a count of iterations (100x): %w", benchtime, err)
	}
	if d <= 0 {
		return nil, fmt.Errorf("-benchtime %q: a duration must be above 0", benchtime)
	}
	return []string{"-benchtime", strconv.FormatFloat(d.Seconds(), 'g', -1, 64)}, nil
}

func tableIDs() []string {
	var ids []string
	for _, t := range tables {
		ids = append(ids, t.id)
	}
	return ids
}

func binPath(dir, pkg string) string {
	return filepath.Join(dir, strings.ReplaceAll(pkg, "/", "_")+".test")
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parse adds the benchmark lines of out to results, keyed by package and
// name.
func parse(pkg string, out []byte, results map[string]*result) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		key := pkg + " " + m[1]
		r := results[key]
		if r == nil {
			r = &result{}
			results[key] = r
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				r.ns = append(r.ns, v)
			case "cpu-ns/op":
				r.cpu = append(r.cpu, v)
			case "B/op":
				r.bytes = append(r.bytes, v)
			case "allocs/op":
				r.allocs = append(r.allocs, v)
			case "live-B":
				r.live = append(r.live, v)
			}
		}
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// timeOf is the median time of r: CPU time when reported, wall time
// otherwise (marked).
func timeOf(r *result) (float64, string) {
	if len(r.cpu) > 0 {
		return median(r.cpu), ""
	}
	return median(r.ns), " (wall)"
}

// times is r's time per round: CPU time when reported, wall time otherwise.
func times(r *result) []float64 {
	if len(r.cpu) > 0 {
		return r.cpu
	}
	return r.ns
}

// pairedRatio is the median over the rounds of r's time divided by base's
// in the same round; the ratio of the medians when the rounds do not pair.
func pairedRatio(r, base *result) float64 {
	a, b := times(r), times(base)
	if len(a) != len(b) {
		return median(a) / median(b)
	}
	q := make([]float64, len(a))
	for i := range a {
		q[i] = a[i] / b[i]
	}
	return median(q)
}

// pairedDelta is pairedRatio's difference: the median of r's time minus
// base's, round by round.
func pairedDelta(r, base *result) float64 {
	a, b := times(r), times(base)
	if len(a) != len(b) {
		return median(a) - median(b)
	}
	d := make([]float64, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return median(d)
}

func render(t table, results map[string]*result) (string, error) {
	var b strings.Builder
	wallHeader, wallRule, vsHeader := "", "", "vs. it"
	if t.wall {
		wallHeader, wallRule = " wall ns/op |", " ---: |"
	}
	if t.spread {
		vsHeader = "vs. it (median; lowest and highest round)"
	}
	fmt.Fprintf(&b, "| operation | ns/op |%s B/op | allocs/op | %s, ns/op | %s |\n| --- | ---: |%s ---: | ---: | ---: | ---: |\n",
		wallHeader, t.baseHeader, vsHeader, wallRule)
	for _, r := range t.rows {
		res := results[r.pkg+" "+r.name]
		if res == nil {
			return "", fmt.Errorf("no result for %s in %s: was the benchmark renamed?", r.name, r.pkg)
		}
		ns, mark := timeOf(res)
		fmt.Fprintf(&b, "| %s | %s%s |", r.label, num(ns), mark)
		if t.wall {
			fmt.Fprintf(&b, " %s |", num(median(res.ns)))
		}
		fmt.Fprintf(&b, " %s | %s |", countOf(res.bytes), countOf(res.allocs))
		if r.base == "" {
			b.WriteString(" | |\n")
			continue
		}
		basePkg := r.basePkg
		if basePkg == "" {
			basePkg = r.pkg
		}
		base := results[basePkg+" "+r.base]
		if base == nil {
			return "", fmt.Errorf("no result for %s in %s: was the benchmark renamed?", r.base, basePkg)
		}
		bns, _ := timeOf(base)
		// The comparison is the median over the rounds of each round's own
		// comparison: a row and its baseline ran in the same binary run,
		// seconds apart, so what other work did to the machine in that round
		// weighs on both.
		q, d := pairedRatio(res, base), pairedDelta(res, base)
		vs := compared(t.compare, q, d)
		if lo, hi, ok := roundRange(res, base); ok && t.spread {
			// Each round's own ratio, and its difference, move together:
			// the lowest ratio is the lowest difference's round.
			vs += fmt.Sprintf(" (%s to %s)", compared(t.compare, lo[0], lo[1]), compared(t.compare, hi[0], hi[1]))
		}
		fmt.Fprintf(&b, " %s | %s |\n", num(bns), vs)
	}
	return b.String(), nil
}

// compared formats a row's comparison with its baseline, the ratio q or
// the difference d (ns), as compare asks.
func compared(compare int, q, d float64) string {
	switch compare {
	case ratio:
		return fmt.Sprintf("%.2f×", q)
	case pct:
		return fmt.Sprintf("%+.0f%%", 100*(q-1))
	default:
		return fmt.Sprintf("%+.2f µs", d/1000)
	}
}

// roundRange is the ratio and difference of r to base in the round where
// the ratio was lowest, and in the one where it was highest; ok false when
// the rounds do not pair.
func roundRange(r, base *result) (lo, hi [2]float64, ok bool) {
	a, b := times(r), times(base)
	if len(a) != len(b) || len(a) == 0 {
		return lo, hi, false
	}
	for i := range a {
		q := [2]float64{a[i] / b[i], a[i] - b[i]}
		if i == 0 || q[0] < lo[0] {
			lo = q
		}
		if i == 0 || q[0] > hi[0] {
			hi = q
		}
	}
	return lo, hi, true
}

// num formats a median: thousands separated, one decimal below 100.
func num(v float64) string {
	if v < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return thousands(int64(v + 0.5))
}

// count formats a median count (bytes, allocations) as a whole number.
func count(v float64) string { return thousands(int64(v + 0.5)) }

// countOf is count of the median of v, or blank when the benchmark did not
// report it (the Python original's do not).
func countOf(v []float64) string {
	if len(v) == 0 {
		return ""
	}
	return count(median(v))
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func describeMachine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	goVersion := runtime.Version()
	if out, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		goVersion = strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("Measured %s on %d CPUs (%s), %s/%s, %s, load average %s at the start",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, goVersion, loadAverage())
}

func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// rewrite replaces each block between its markers in the file at path.
func rewrite(path string, blocks map[string]string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	for id, body := range blocks {
		open, end := "<!-- perf:"+id+":start -->\n", "<!-- perf:"+id+":end -->"
		i := strings.Index(s, open)
		j := strings.Index(s, end)
		if i < 0 || j < i {
			return fmt.Errorf("%s has no %q … %q markers", path, strings.TrimSpace(open), end)
		}
		s = s[:i+len(open)] + body + s[j:]
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
