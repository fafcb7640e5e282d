package execsession_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/execsession"
)

// The test binary is also every child process these tests start: with
// childModeVar set, TestMain runs one of the child modes below instead of the
// tests and prints what it saw as JSON on stdout.
const childModeVar = "EXECSESSION_TEST_CHILD"

const (
	modeReport      = "report"       // restore the session, print it
	modeRelay       = "relay"        // restore the session, start a grandchild with Command, print both
	modePassThrough = "pass-through" // a fresh, never engaged parent: start a child over a foreign inherited session
	modeEnvironRows = "environ-rows" // a fresh, never engaged parent: print Environ for the not-engaged table rows
	// modeRelayPlain restores nothing before it starts a grandchild: a tool
	// that knows nothing of sessions (Command from context.Background()).
	modeRelayPlain = "relay-plain"
	modeWorker     = "kanban-worker" // lineage_test.go: an agent that delegates, started with a Kanban run identity
	// modeDistrust restores through a policy that trusts no parent and
	// verifies signatures (signingKey), then starts a grandchild with
	// Command from what it restored.
	modeDistrust = "distrust"
)

func TestMain(m *testing.M) {
	otel.SetTextMapPropagator(otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}))
	if mode := os.Getenv(childModeVar); mode != "" {
		os.Exit(runChild(mode))
	}
	// The test process binds sessions, like a gateway. Latch Engaged before
	// any test runs, so no result depends on the order tests run in; what a
	// never engaged parent does is observed in a fresh process.
	otelsession.Bind(context.Background(), otelsession.Session{})
	goleak.VerifyTestMain(m)
}

// report is what a child process saw.
type report struct {
	Err     string   `json:"err,omitempty"`
	ErrIs   []string `json:"err_is,omitempty"` // the exported errors Err wraps
	Engaged bool     `json:"engaged"`
	// ParentEngaged is the parent's latch, in the fresh-parent modes.
	ParentEngaged bool                 `json:"parent_engaged"`
	Delegated     bool                 `json:"delegated"`
	Cwd           string               `json:"cwd"` // otelsession.Cwd
	Wd            string               `json:"wd"`  // os.Getwd
	Fields        map[string]fieldSeen `json:"fields"`
	// Env holds the variables the bridge manages that are present in the
	// child's environment, as os.LookupEnv sees them.
	Env        map[string]string `json:"env"`
	TraceID    string            `json:"trace_id,omitempty"`
	Foreign    map[string]string `json:"foreign,omitempty"` // baggage members that are not session fields
	Grandchild *report           `json:"grandchild,omitempty"`
	// Kanban holds every HERMES_KANBAN_* variable in the child's environment.
	Kanban map[string]string `json:"kanban,omitempty"`
	// SessionIDGetenv is what code reading HERMES_SESSION_ID gets there.
	SessionIDGetenv string `json:"session_id_getenv"`
}

// fieldSeen is one field in the child: its state, and what code reading it
// by its legacy name gets.
type fieldSeen struct {
	Value  string `json:"value"`
	State  string `json:"state"`
	Getenv string `json:"getenv"` // otelsession.Getenv with defaultMark
}

// defaultMark is the default given to otelsession.Getenv in children: it
// reads back when the variable is absent from the environment too.
const defaultMark = "<absent>"

// managedVars are the variables reported in report.Env.
var managedVars = func() []string {
	names := []string{"BAGGAGE", "TRACEPARENT", "TRACESTATE", execsession.CwdVar, execsession.DelegatedChildVar}
	names = append(names, fallback.KanbanRunIdentityVars()...)
	for _, f := range otelsession.Fields() {
		names = append(names, f.Name())
	}
	return names
}()

var exportedErrors = map[string]error{
	"ErrInvalidVariable":             execsession.ErrInvalidVariable,
	"propagation.ErrBaggageTooLarge": propagation.ErrBaggageTooLarge,
	"propagation.ErrMalformedMember": propagation.ErrMalformedMember,
	"propagation.ErrDuplicateMember": propagation.ErrDuplicateMember,
	"propagation.ErrInvalidValue":    propagation.ErrInvalidValue,
	"propagation.ErrLocalField":      propagation.ErrLocalField,
}

func runChild(mode string) int {
	var r *report
	var err error
	switch mode {
	case modeReport:
		r = restore()
	case modeRelay:
		r = restore()
		ctx, _ := execsession.FromEnvironment(context.Background())
		r.Grandchild, err = start(execsession.Command(ctx, os.Args[0], "-test.run=^$"), modeReport)
	case modeDistrust:
		v, verr := propagation.NewVerifier([]propagation.Key{signingKey})
		if verr != nil {
			return printJSON(nil, verr)
		}
		cfg := execsession.Config{Inbound: propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(v))}
		var ctx context.Context
		r, ctx = restoreWith(cfg)
		r.Grandchild, err = start(cfg.Command(ctx, os.Args[0], "-test.run=^$"), modeReport)
	case modeRelayPlain:
		r = restore()
		r.Grandchild, err = start(execsession.Command(context.Background(), os.Args[0], "-test.run=^$"), modeReport)
	case modeWorker:
		w, err := kanbanWorker()
		return printJSON(w, err)
	case modePassThrough:
		r, err = passThrough()
	case modeEnvironRows:
		rows := map[string][]string{}
		for _, c := range environCases() {
			if !c.engaged {
				rows[c.name] = execsession.Environ(c.ctx(context.Background()), c.inherited)
			}
		}
		if otelsession.Engaged() {
			err = errors.New("building the rows latched Engaged")
		}
		return printJSON(rows, err)
	default:
		err = fmt.Errorf("unknown child mode %q", mode)
	}
	return printJSON(r, err)
}

func printJSON(v any, err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// restore is the start-up of a tool: FromEnvironment, then everything the
// tool can see.
func restore() *report {
	r, _ := restoreWith(execsession.Config{})
	return r
}

// restoreWith is restore through cfg; it returns the restored context too.
func restoreWith(cfg execsession.Config) (*report, context.Context) {
	ctx, err := cfg.FromEnvironment(context.Background())
	r := &report{
		Engaged:   otelsession.Engaged(),
		Delegated: otelsession.IsDelegatedChild(ctx),
		Cwd:       otelsession.Cwd(ctx),
		Fields:    map[string]fieldSeen{},
		Env:       map[string]string{},
	}
	if err != nil {
		r.Err = err.Error()
		for name, target := range exportedErrors {
			if errors.Is(err, target) {
				r.ErrIs = append(r.ErrIs, name)
			}
		}
		slices.Sort(r.ErrIs)
	}
	r.Wd, _ = os.Getwd()
	r.SessionIDGetenv = otelsession.Getenv(ctx, otelsession.FieldSessionID.Name(), defaultMark)
	for _, kv := range os.Environ() {
		if name, value, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "HERMES_KANBAN_") {
			if r.Kanban == nil {
				r.Kanban = map[string]string{}
			}
			r.Kanban[name] = value
		}
	}
	for _, f := range otelsession.Fields() {
		v, st := otelsession.Lookup(ctx, f)
		r.Fields[f.Name()] = fieldSeen{Value: v, State: st.String(), Getenv: otelsession.Getenv(ctx, f.Name(), defaultMark)}
	}
	for _, name := range managedVars {
		if v, ok := os.LookupEnv(name); ok {
			r.Env[name] = v
		}
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.TraceID = sc.TraceID().String()
	}
	for _, m := range baggage.FromContext(ctx).Members() {
		if _, ok := otelsession.FieldByKey(m.Key()); !ok {
			if r.Foreign == nil {
				r.Foreign = map[string]string{}
			}
			r.Foreign[m.Key()] = m.Value()
		}
	}
	return r, ctx
}

// passThrough runs in a fresh process that never binds a session (a CLI, a
// cron job): the session variables it inherited are its own, so its children
// inherit them, except where its context binds a field.
func passThrough() (*report, error) {
	ctx := otelsession.With(context.Background(), otelsession.FieldChatID, "bound-chat")
	inherited := append(os.Environ(),
		"HERMES_SESSION_THREAD_ID=inherited-thread",
		"HERMES_SESSION_CHAT_ID=inherited-chat",
		"HERMES_UI_SESSION_ID=inherited-tab",
		execsession.CwdVar+"=/inherited/dir",
	)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = execsession.Environ(ctx, inherited)
	r, err := start(cmd, modeReport)
	if r != nil {
		r.ParentEngaged = otelsession.Engaged()
	}
	return r, err
}

// start runs cmd as a child in modeReport or modeRelay and decodes its report.
func start(cmd *exec.Cmd, mode string) (*report, error) {
	var r report
	if err := run(cmd, mode, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// run runs cmd as a child in mode and decodes what it printed into v.
func run(cmd *exec.Cmd, mode string, v any) error {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	// A child built with -race otherwise waits a second before exiting.
	goRace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, childModeVar+"="+mode, "GORACE="+goRace)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("child %s: %w; stderr: %s", mode, err, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("child %s printed %q: %w", mode, out, err)
	}
	return nil
}

// testTrace is the span context tests start children under.
var testTrace = func() trace.SpanContext {
	ts, _ := trace.ParseTraceState("vendor=opaque")
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
}()

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
