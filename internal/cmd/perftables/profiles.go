package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// A profile is one benchmark's CPU profile and how the time of one function
// in it divides: the evidence behind the README's "where the cost goes", so
// that a statement such as "OpenTelemetry's SetMember is four fifths of the
// next message's Bind" is regenerated with the tables rather than written
// down once.
type profile struct {
	file, title string
	pkg, bench  string // the package's directory and a -test.bench pattern matching one benchmark
	whole       string // regexp of the function whose time is divided
	parts       []part
}

// A part is a share of whole: the first function the regexp matches, with
// everything it calls.
type part struct{ label, fn string }

var profiles = []profile{
	{
		file: "bind_next_message.txt", title: "Bind, the next message of a conversation (a cached session, a new message id)",
		pkg: "otelsession", bench: "^BenchmarkBind$/^sessionwire$/^Bind_next_message$",
		whole: `^github.com/sessionwire/sessionwire/otelsession\.Bind$`,
		parts: []part{{"OpenTelemetry copying its map (Baggage.SetMember)", `^go.opentelemetry.io/otel/baggage\.Baggage\.SetMember$`}},
	},
	{
		file: "bind_first_time.txt", title: "Bind of a session never bound before",
		pkg: "otelsession", bench: "^BenchmarkBind$/^sessionwire$/^Bind_first_time$",
		whole: `^github.com/sessionwire/sessionwire/otelsession\.Bind$`,
		parts: []part{
			{"baggage.New (the floor)", `^go.opentelemetry.io/otel/baggage\.New$`},
			{"OpenTelemetry's member constructor (baggage.NewMemberRaw)", `^go.opentelemetry.io/otel/baggage\.NewMemberRaw$`},
			{"sessionwire's value checks (ValidateValue)", `^github.com/sessionwire/sessionwire/otelsession\.ValidateValue$`},
			{"the bind cache's insertion (remember)", `^github.com/sessionwire/sessionwire/otelsession\.remember$`},
		},
	},
	{
		file: "inbound_mapcarrier.txt", title: "Inbound.Extract of a full session from a MapCarrier",
		pkg: "propagation/httpsession", bench: "^BenchmarkInbound$/^MapCarrier$/^path=session$",
		whole: `^github.com/sessionwire/sessionwire/propagation\.\(\*Inbound\)\.Extract$`,
		parts: []part{
			{"building the line's baggage with OpenTelemetry's constructors (simpleBaggage; the raw path parses it)", `^github.com/sessionwire/sessionwire/propagation\.simpleBaggage$`},
			{"  of which OpenTelemetry's baggage.New", `^go.opentelemetry.io/otel/baggage\.New$`},
			{"  of which OpenTelemetry's baggage.NewMemberRaw", `^go.opentelemetry.io/otel/baggage\.NewMemberRaw$`},
			{"OpenTelemetry's parse (only a line that is not simple; none here)", `^go.opentelemetry.io/otel/baggage\.Parse$`},
			{"the policy's check of every member (OpenTelemetry's Baggage.Member look-ups included)", `^github.com/sessionwire/sessionwire/propagation\.\(\*inboundSession\)\.check$`},
			{"  of which OpenTelemetry's Baggage.Member", `^go.opentelemetry.io/otel/baggage\.Baggage\.Member$`},
			{"the raw header scan (duplicates, forbidden keys)", `^github.com/sessionwire/sessionwire/propagation\.scanSessionKeys$`},
			{"the record of the accepted session for the reads (withRecord)", `^github.com/sessionwire/sessionwire/propagation\.\(\*inboundSession\)\.withRecord$`},
		},
	},
	{
		file: "http_handler.txt", title: "the whole httpsession.Handler step",
		pkg: "propagation/httpsession", bench: "^BenchmarkInbound$/^Handler$/^path=session$",
		whole: `^github.com/sessionwire/sessionwire/propagation/httpsession\.\(\*handler\)\.ServeHTTP$`,
		parts: []part{
			{"building the one baggage line's baggage once (simpleBaggage: OpenTelemetry's constructors, where a raw handler runs its parser)", `^github.com/sessionwire/sessionwire/propagation\.simpleBaggage$`},
			{"  of which OpenTelemetry's baggage.New", `^go.opentelemetry.io/otel/baggage\.New$`},
		},
	},
	{
		file: "outbound_signed.txt", title: "Outbound.Inject of a full session, allowed and signed",
		pkg: "propagation", bench: "^BenchmarkOutboundInject$/^signed$/^path=session$",
		whole: `^github.com/sessionwire/sessionwire/propagation\.\(\*Outbound\)\.inject$`,
		parts: []part{
			{"the session's line written from the writer's record (otelsession's wireLine, where the raw path runs Baggage.String)", `^github.com/sessionwire/sessionwire/otelsession\.wireLine$`},
			{"the trace context, and the line set into the carrier (stockprop.injectLine)", `^github.com/sessionwire/sessionwire/propagation/internal/stockprop\.injectLine$`},
			{"the propagators writing the carrier (the raw path itself; only for a baggage no writer built)", `^go.opentelemetry.io/otel/propagation\.compositeTextMapPropagator\.Inject$`},
			{"signing into the line the propagator wrote (appendTo)", `^github.com/sessionwire/sessionwire/propagation\.\(\*Signer\)\.appendTo$`},
			{"  of which reading the signed members (OpenTelemetry's Baggage.Member, one per signed key)", `^github.com/sessionwire/sessionwire/propagation\.\(\*signedValues\)\.gather$`},
			{"  of which the HMAC", `^github.com/sessionwire/sessionwire/propagation\.\(\*macKey\)\.sum$`},
			{"OpenTelemetry adding the signature member (Baggage.SetMember; only on the fallback path)", `^go.opentelemetry.io/otel/baggage\.Baggage\.SetMember$`},
		},
	},
	{
		file: "grpc_server_steps.txt", title: "the gRPC server step, recommended configuration (otelgrpc given the Edge's propagator, then the Edge's interceptor)",
		pkg: "propagation/grpcsession", bench: `^BenchmarkSteps$/^server$/^otelgrpc_given_edge_propagator$`,
		whole: `^github.com/sessionwire/sessionwire/propagation/grpcsession_test\.BenchmarkSteps\.func[\d.]+$`, // the step's loop (a closure edgeStep returns)
		parts: []part{
			{"the Edge's propagator, inside otelgrpc's extraction", `^github.com/sessionwire/sessionwire/propagation/grpcsession\.edgePropagator\.Extract$`},
			{"  of which Inbound.Extract", `^github.com/sessionwire/sessionwire/propagation\.\(\*Inbound\)\.Extract$`},
			{"  of which building the line's baggage (simpleBaggage: OpenTelemetry's constructors, where raw otelgrpc runs its parser)", `^github.com/sessionwire/sessionwire/propagation\.simpleBaggage$`},
			{"  of which the policy's check of every member", `^github.com/sessionwire/sessionwire/propagation\.\(\*inboundSession\)\.check$`},
			{"otelgrpc's copy of the incoming metadata (as in raw otelgrpc)", `^google.golang.org/grpc/metadata\.FromIncomingContext$`},
			{"the Edge's interceptor acting on the verdict", `^github.com/sessionwire/sessionwire/propagation/grpcsession\.\(\*config\)\.actOn$`},
		},
	},
	{
		file: "grpc_client_steps.txt", title: "the gRPC client step, recommended configuration (the Edge's interceptor, then otelgrpc given the Edge's propagator)",
		pkg: "propagation/grpcsession", bench: `^BenchmarkSteps$/^client$/^otelgrpc_given_edge_propagator$`,
		whole: `^github.com/sessionwire/sessionwire/propagation/grpcsession\.\(\*config\)\.edgeCall$`,
		parts: []part{
			{"the outbound policy, inside otelgrpc's injection", `^github.com/sessionwire/sessionwire/propagation\.\(\*Outbound\)\.inject$`},
			{"  of which the line written from the writer's record, the application's member beside the session included (otelsession's wireLine, where raw otelgrpc runs Baggage.String)", `^github.com/sessionwire/sessionwire/otelsession\.wireLine$`},
			{"  of which the trace context, and the line set into otelgrpc's carrier (stockprop.injectLine)", `^github.com/sessionwire/sessionwire/propagation/internal/stockprop\.injectLine$`},
			{"  of which the propagators writing the carrier (only for a baggage no writer built)", `^go.opentelemetry.io/otel/propagation\.compositeTextMapPropagator\.Inject$`},
			{"otelgrpc's copy of the outgoing metadata (as in raw otelgrpc)", `^google.golang.org/grpc/metadata\.FromOutgoingContext$`},
			{"the interceptor naming the destination", `^github.com/sessionwire/sessionwire/propagation/grpcsession\.\(\*connState\)\.dest$`},
		},
	},
	{
		file: "environ.txt", title: "execsession.Environ of a full session",
		pkg: "propagation/execsession", bench: "^BenchmarkEnviron$/^Environ$/^path=session$",
		whole: `^github.com/sessionwire/sessionwire/propagation/execsession\.Config\.Environ$`,
		parts: []part{
			{"the outbound policy's injection (the raw path's envcar injection inside)", `^github.com/sessionwire/sessionwire/propagation\.\(\*Outbound\)\.inject$`},
			{"  of which the session's line written from the writer's record (otelsession's wireLine, where the raw path runs Baggage.String)", `^github.com/sessionwire/sessionwire/otelsession\.wireLine$`},
			{"reading every field for the legacy HERMES_* variables (otelsession.Range, the leak policy)", `^github.com/sessionwire/sessionwire/otelsession\.Range$`},
			{"the propagator's variable names (OpenTelemetry's Fields)", `^github.com/sessionwire/sessionwire/propagation/execsession\.propagatorVars$`},
		},
	},
	{
		file: "span_processor.txt", title: "a span with SpanProcessor, default fields, user id hashed",
		pkg: "otelsession/sessiontrace", bench: "^BenchmarkSpanStart$/^sessiontrace$/^processor$",
		whole: `^github.com/sessionwire/sessionwire/otelsession/sessiontrace\.\(\*SpanProcessor\)\.OnStart$`,
		parts: []part{{"the SDK storing the attributes (recordingSpan.SetAttributes)", `^go.opentelemetry.io/otel/sdk/trace\.\(\*recordingSpan\)\.SetAttributes$`}},
	},
	{
		file: "kafka_consume.txt", title: "kafkasession Consumer.Extract",
		pkg: "propagation/kafkasession", bench: "^BenchmarkExtract$/^Consumer.Extract$/^path=session$",
		whole: `^github.com/sessionwire/sessionwire/propagation/kafkasession\.\(\*Consumer\)\.Extract$`,
		parts: []part{
			{"building the one baggage line's baggage once (simpleBaggage: OpenTelemetry's constructors, where the raw path runs its parser)", `^github.com/sessionwire/sessionwire/propagation\.simpleBaggage$`},
			{"the trace context (OpenTelemetry's TraceContext.Extract)", `^go.opentelemetry.io/otel/propagation\.TraceContext\.Extract$`},
			{"the policy's check of every member", `^github.com/sessionwire/sessionwire/propagation\.\(\*inboundSession\)\.check$`},
			{"the raw header scan", `^github.com/sessionwire/sessionwire/propagation\.scanSessionKeys$`},
		},
	},
}

// writeProfiles records every profile into dir, running each benchmark for
// benchtime from the binaries in bin, and returns a line per profile.
func writeProfiles(dir, bin, benchtime, machine string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var summary []string
	for _, p := range profiles {
		testBin := binPath(bin, p.pkg)
		prof := filepath.Join(bin, strings.TrimSuffix(p.file, ".txt")+".prof")
		cmd := exec.Command(testBin, "-test.run", "^$", "-test.bench", p.bench, "-test.benchtime", benchtime,
			"-test.cpuprofile", prof)
		cmd.Dir = p.pkg
		cmd.Stderr = os.Stderr
		if out, err := cmd.Output(); err != nil {
			return nil, fmt.Errorf("profile %s: %w", p.file, err)
		} else if !bytes.Contains(out, []byte("Benchmark")) {
			return nil, fmt.Errorf("profile %s: -test.bench %q matched no benchmark in %s", p.file, p.bench, p.pkg)
		}
		top, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount", "100000", testBin, prof).Output()
		if err != nil {
			return nil, fmt.Errorf("profile %s: go tool pprof: %w", p.file, err)
		}
		cum := cumulative(top)
		whole, _ := first(cum, p.whole)
		if whole == 0 {
			// A benchtime too short to sample; the names were checked.
			summary = append(summary, fmt.Sprintf("%s: no samples in %s (raise -profiletime)", p.title, p.whole))
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "# %s: CPU profile of %s in ./%s, -benchtime %s\n", p.title, p.bench, p.pkg, benchtime)
		fmt.Fprintf(&b, "# %s\n# written by: go run ./internal/cmd/perftables -profiles %s\n", machine, dir)
		fmt.Fprintf(&b, "# %s: %.2f s sampled; of it:\n", strings.ReplaceAll(strings.Trim(p.whole, "^$"), `\`, ""), whole)
		line := p.title + ":"
		for _, pt := range p.parts {
			v, _ := first(cum, pt.fn)
			fmt.Fprintf(&b, "#   %5.1f%%  %s\n", 100*v/whole, pt.label)
			line += fmt.Sprintf(" %s %.0f%%;", strings.TrimSpace(pt.label), 100*v/whole)
		}
		focus, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount", "45",
			"-focus", strings.Trim(p.whole, "^$"), testBin, prof).Output()
		if err != nil {
			return nil, fmt.Errorf("profile %s: go tool pprof: %w", p.file, err)
		}
		b.Write(focus)
		if err := os.WriteFile(filepath.Join(dir, p.file), []byte(b.String()), 0o644); err != nil {
			return nil, err
		}
		summary = append(summary, strings.TrimSuffix(line, ";"))
	}
	return summary, nil
}

// cumulative reads the function names and cumulative seconds of a
// `go tool pprof -top -cum` listing, in its order.
func cumulative(top []byte) []fnTime {
	var out []fnTime
	sc := bufio.NewScanner(bytes.NewReader(top))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[4], "%") {
			continue
		}
		s, ok := seconds(f[3])
		if !ok {
			continue
		}
		out = append(out, fnTime{strings.Join(f[5:], " "), s})
	}
	return out
}

type fnTime struct {
	name string
	sec  float64
}

// first is the cumulative time of the first function re matches.
func first(cum []fnTime, re string) (float64, bool) {
	r := regexp.MustCompile(re)
	for _, c := range cum {
		if r.MatchString(c.name) {
			return c.sec, true
		}
	}
	return 0, false
}

// seconds parses pprof's durations: "2.35s", "980ms", "0".
func seconds(s string) (float64, bool) {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "ms"):
		s, mult = strings.TrimSuffix(s, "ms"), 1e-3
	case strings.HasSuffix(s, "us"), strings.HasSuffix(s, "µs"):
		s, mult = strings.TrimSuffix(strings.TrimSuffix(s, "us"), "µs"), 1e-6
	case strings.HasSuffix(s, "s"):
		s = strings.TrimSuffix(s, "s")
	}
	v, err := strconv.ParseFloat(s, 64)
	return v * mult, err == nil
}
