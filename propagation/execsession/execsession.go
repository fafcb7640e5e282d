package execsession

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/contrib/propagators/envcar"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// Variables this package writes beside the OTel carriers and the legacy
// HERMES_* variables.
const (
	// DelegatedChildVar marks the processes of a delegated child's lineage
	// (fallback.DelegatedChildVar, HERMES_DELEGATED_CHILD_CONTEXT, the
	// original's name): "1" in a child started from a delegated child's
	// context, the inherited value in every child of a process that is
	// itself marked, absent otherwise.
	DelegatedChildVar = fallback.DelegatedChildVar
	// CwdVar holds the session's logical working directory (otelsession.Cwd):
	// the working directory's row of the wire-key table.
	CwdVar = otelsession.CwdEnv
)

// carrierVars are the OTel environment carriers of the W3C propagators
// (https://opentelemetry.io/docs/specs/otel/context/env-carriers/). They are
// always replaced or removed, whatever the configured propagator, because
// an inherited one belongs to whatever started this process, not to the
// context a child is started from.
var carrierVars = [...]string{"BAGGAGE", "TRACEPARENT", "TRACESTATE"}

// ErrInvalidVariable: a variable this package reads in a child (a local
// field, CwdVar) holds a value the parent could not have written.
var ErrInvalidVariable = errors.New("invalid session variable in the environment")

// Config configures the bridge. Its zero value is ready to use; the
// package-level functions use it.
type Config struct {
	// Propagator injects the carriers in the parent and extracts them in the
	// child; nil means otel.GetTextMapPropagator(), read at each call. Parent
	// and child must agree on it, and it must include propagation.Baggage{}
	// for the session's remote fields to travel in BAGGAGE.
	Propagator otelprop.TextMapPropagator
	// Inbound is the trust policy a child applies to what its parent sent;
	// nil means one that trusts the parent (propagation.TrustAll: the parent
	// started this process, so it is in the same trust domain), shared by
	// every zero Config. Values are validated either way. A policy that does
	// not trust the parent (peer transport "env") takes the session from a
	// verified BAGGAGE only: see FromEnvironment.
	Inbound *propagation.Inbound
	// Outbound is the policy the parent sends the session through; it sees
	// propagation.Dest{Transport: "env"}. nil is propagation's default for
	// every transport, which lets the session into child processes (same
	// host, same user, same trust domain) and nowhere else. A policy that
	// refuses the child leaves it without the session: no BAGGAGE session
	// member and none of the bound HERMES_* variables. With a signer, the
	// child receives a signed session that its own outbound hops can forward
	// for verification further on.
	Outbound *propagation.Outbound
}

// distrustedParent is the fallback environment of a context FromEnvironment
// returns when its policy does not trust the parent process. The parent
// wrote the session's legacy variables (HERMES_SESSION_CHAT_ID, …) as it
// wrote BAGGAGE, and nothing verifies them (a local field's cannot even be
// signed): read through otelsession.Getenv they would put back what the
// policy stripped, or fill in what a verified session left Unset. So they
// read as absent, and Environ does not pass them on to a grandchild. Other
// variables read as they are.
type distrustedParent struct{ fallback.Env }

func (d distrustedParent) LookupEnv(name string) (string, bool) {
	if _, ok := otelsession.FieldByName(name); ok {
		return "", false
	}
	return d.Env.LookupEnv(name)
}

// defaultInbound is the policy of the zero Config.
var defaultInbound = propagation.NewInbound(propagation.TrustAll)

func (c Config) propagator() otelprop.TextMapPropagator {
	if c.Propagator != nil {
		return c.Propagator
	}
	return otel.GetTextMapPropagator()
}

// Environ returns the environment for a child process started from ctx, built
// from inherited (usually os.Environ()) and the zero Config; see
// [Config.Environ].
func Environ(ctx context.Context, inherited []string) []string {
	return Config{}.Environ(ctx, inherited)
}

// Command is [Config.Command] with the zero Config.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return Config{}.Command(ctx, name, args...)
}

// FromEnvironment is [Config.FromEnvironment] with the zero Config.
func FromEnvironment(ctx context.Context) (context.Context, error) {
	return Config{}.FromEnvironment(ctx)
}

// Environ returns the environment for a child process started from ctx, in
// the "KEY=value" form of os.Environ and exec.Cmd.Env. Entries of inherited
// that the bridge does not manage are kept, in their order; the managed ones
// follow: the legacy HERMES_* variables and CwdVar as the leak policy of
// package fallback decides, DelegatedChildVar as fallback.DelegatedMark
// decides (stamped when ctx is a delegated child, kept when inherited), and
// the OTel carriers the propagator injects. BAGGAGE, TRACEPARENT, TRACESTATE
// and every other name the propagator uses are removed from inherited first,
// so only what ctx holds reaches the child; so is the Kanban run identity
// (fallback.IsKanbanRunIdentity), which belongs to this process alone.
// inherited is not modified, and the current process's environment is never
// written.
func (c Config) Environ(ctx context.Context, inherited []string) []string {
	if ctx == nil {
		ctx = context.Background()
	}
	prop := c.propagator()
	inj := new(injection)
	inj.carrier.SetEnvFunc = inj.set
	dest := propagation.Dest{Transport: propagation.TransportEnv}
	if !c.Outbound.Allows(ctx, dest) {
		// Nothing of the session, in BAGGAGE or in HERMES_* variables.
		ctx = otelsession.Clear(propagation.WithoutSession(ctx))
	}
	if err := c.Outbound.Inject(ctx, prop, injCarrier{inj}, dest); err != nil {
		otel.Handle(fmt.Errorf("execsession: child environment: %w", err))
	}
	carriers := inj.pairs()
	replaced := lastVars.of(prop)

	// One pass over inherited: unmanaged entries are kept in order, managed
	// ones only noted (the last one wins, as in exec.Cmd) for the policy.
	// Most names are told apart by their first byte alone.
	first := managedFirstBytes
	for _, n := range replaced {
		first[n[0]] = true
	}
	var seen [numVars]struct {
		kv, value string
		present   bool
	}
	var mark struct {
		value   string
		present bool
	}
	env := make([]string, 0, len(inherited)+numVars+len(carriers)+1)
	for _, kv := range inherited {
		if kv == "" || !first[kv[0]] {
			env = append(env, kv)
			continue
		}
		name, value, _ := strings.Cut(kv, "=")
		if i := varIndex(name); i >= 0 {
			seen[i].kv, seen[i].value, seen[i].present = kv, value, true
			continue
		}
		if name == DelegatedChildVar {
			mark.value, mark.present = value, true
			continue
		}
		if fallback.IsKanbanRunIdentity(name) || slices.Contains(replaced, name) {
			continue
		}
		env = append(env, kv)
	}

	// The leak policy (fallback.Decide, which fallback.ChildEnviron applies
	// too) for every field and the working directory, in index order.
	// A session read from a parent the policy distrusts is the context's
	// alone: the process environment's variables are that parent's, not to
	// be passed on (as in a process that binds sessions itself).
	_, distrusted := fallback.EnvFrom(ctx).(distrustedParent)
	engaged := otelsession.Engaged() || distrusted
	var decided [numVars]struct {
		value string
		out   uint8 // 0 absent, 1 the inherited entry as it is, 2 write value
	}
	size := 0
	decide := func(i int, v fallback.Var) {
		value, keep := fallback.Decide(v, seen[i].value, seen[i].present, engaged)
		switch {
		case !keep:
		case seen[i].present && value == seen[i].value && len(seen[i].kv) > len(v.Name):
			decided[i].out = 1
		default:
			decided[i].value, decided[i].out = value, 2
			size += len(v.Name) + 1 + len(value)
		}
	}
	otelsession.Range(ctx, func(f otelsession.Field, v string, st otelsession.State) bool {
		i := int(f) - 1
		if seen[i].present {
			decide(i, fallback.Var{Name: varNames[i], Bound: st != otelsession.Unset, Value: v})
		} else if value, keep := decideUninherited(st != otelsession.Unset, v); keep {
			decided[i].value, decided[i].out = value, 2
			size += len(varNames[i]) + 1 + len(value)
		}
		return true
	})
	cwd := otelsession.Cwd(ctx)
	decide(cwdIndex, fallback.Var{Name: CwdVar, Bound: cwd != "", Value: cwd})
	for _, kv := range carriers {
		size += len(kv[0]) + 1 + len(kv[1])
	}

	// Every entry written here shares one allocation.
	var b strings.Builder
	b.Grow(size) // never outgrown, so the substrings taken below stay valid
	add := func(name, value string) {
		start := b.Len()
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(value)
		env = append(env, b.String()[start:])
	}
	for i, d := range decided {
		switch d.out {
		case 1:
			env = append(env, seen[i].kv)
		case 2:
			add(varNames[i], d.value)
		}
	}
	// A distrusting child's mark is the context's alone, as its session is.
	if v, keep := fallback.DelegatedMark(mark.value, mark.present && !distrusted, otelsession.IsDelegatedChild(ctx)); keep {
		env = append(env, DelegatedChildVar+"="+v)
	}
	for _, kv := range carriers {
		add(kv[0], kv[1])
	}
	return env
}

// decideUninherited is fallback.Decide's answer for a variable the parent
// did not inherit, which needs neither the latch nor the variable's name:
// the bound value, or absent. Environ asks it for most fields, where
// building a fallback.Var and calling Decide was about a tenth of its own
// work; TestDecideUninheritedIsTheLeakPolicy holds it to Decide.
func decideUninherited(bound bool, value string) (string, bool) {
	if !bound {
		return "", false
	}
	return value, true
}

// The variables the leak policy decides on: every field, indexed by Field-1,
// then CwdVar.
const (
	numFields = int(otelsession.FieldCronJobOriginPlatform)
	cwdIndex  = numFields
	numVars   = numFields + 1
)

var varNames = func() (names [numVars]string) {
	if fs := otelsession.Fields(); len(fs) != numFields || fs[numFields-1] != otelsession.FieldCronJobOriginPlatform {
		panic("execsession: the field schema changed; update numFields")
	}
	for _, f := range otelsession.Fields() {
		names[f-1] = f.Name()
	}
	names[cwdIndex] = CwdVar
	return names
}()

// managedFirstBytes holds the first byte of every name Environ manages
// beside the propagator's.
var managedFirstBytes = func() (first [256]bool) {
	for _, n := range varNames {
		first[n[0]] = true
	}
	first[DelegatedChildVar[0]] = true
	for _, n := range fallback.KanbanRunIdentityVars() {
		first[n[0]] = true
	}
	for _, n := range carrierVars {
		first[n[0]] = true
	}
	return first
}()

// varIndex returns name's index in varNames, or -1.
func varIndex(name string) int {
	if name == CwdVar {
		return cwdIndex
	}
	if !strings.HasPrefix(name, "HERMES_") {
		return -1
	}
	if f, ok := otelsession.FieldByName(name); ok {
		return int(f) - 1
	}
	return -1
}

// injection collects what a propagator injects through its envcar carrier,
// in injection order; a name set twice keeps its last value. The W3C
// propagators set at most three names, which fit without another allocation.
type injection struct {
	carrier envcar.Carrier
	fixed   [3][2]string
	kv      [][2]string
}

func (in *injection) set(name, value string) {
	for i := range in.kv {
		if in.kv[i][0] == name {
			in.kv[i][1] = value
			return
		}
	}
	if in.kv == nil {
		in.kv = in.fixed[:0]
	}
	in.kv = append(in.kv, [2]string{name, value})
}

// injCarrier is the carrier Environ injects through: the envcar carrier's
// names (normalised as the OTel env-carrier rule says), over what was
// injected so far only. The process's own environment is not a carrier the
// child receives (its BAGGAGE belongs to whatever started this process), so
// it must not look pre-written to the outbound policy.
type injCarrier struct{ in *injection }

func (c injCarrier) Set(key, value string) { c.in.carrier.Set(key, value) }

func (c injCarrier) Get(key string) string {
	n := envName(key)
	for _, kv := range c.in.kv {
		if kv[0] == n {
			return kv[1]
		}
	}
	return ""
}

// Delete removes the variable of key from what was injected, so that
// propagation.Outbound, which deletes an entry before it writes it again
// (appending a signature to the BAGGAGE the propagator wrote), can tell
// that the variable ends with one value.
func (c injCarrier) Delete(key string) {
	n := envName(key)
	c.in.kv = slices.DeleteFunc(c.in.kv, func(kv [2]string) bool { return kv[0] == n })
}

func (c injCarrier) Keys() []string {
	keys := make([]string, 0, len(c.in.kv))
	for _, kv := range c.in.kv {
		keys = append(keys, kv[0])
	}
	return keys
}

// pairs returns what was injected, sorted by name.
func (in *injection) pairs() [][2]string {
	slices.SortFunc(in.kv, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return in.kv
}

// lastVars remembers propagatorVars for the last propagator Environ was
// given. A program uses one (the global one, or its Config's), and a
// composite's Fields builds its list again on every call: about a tenth of
// Environ.
var lastVars varsCache

type varsCache struct{ last atomic.Pointer[varsEntry] }

type varsEntry struct {
	prop  otelprop.TextMapPropagator // kept, so that its identity cannot be reused
	names []string
}

func (c *varsCache) of(prop otelprop.TextMapPropagator) []string {
	if e := c.last.Load(); e != nil && samePropagator(e.prop, prop) {
		return e.names
	}
	names := propagatorVars(prop)
	c.last.Store(&varsEntry{prop: prop, names: names})
	return names
}

// samePropagator reports whether a and b are the same propagator: the same
// composite (a slice of propagators, as otelprop.NewCompositeTextMapPropagator
// makes: the same backing array and length), or equal values of a type
// that can be compared. Anything else is not known to be the same.
func samePropagator(a, b otelprop.TextMapPropagator) bool {
	ta := reflect.TypeOf(a)
	if ta == nil || ta != reflect.TypeOf(b) {
		return false
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Kind() == reflect.Slice {
		return va.Len() == vb.Len() && va.Pointer() == vb.Pointer()
	}
	// Comparable looks into interface fields too, where == would panic.
	return va.Comparable() && vb.Comparable() && va.Equal(vb)
}

// propagatorVars returns the environment names prop may write: the W3C
// carriers, and the normalised names of its fields when it uses others (B3,
// Jaeger, …).
func propagatorVars(prop otelprop.TextMapPropagator) []string {
	names := carrierVars[:]
	for _, f := range prop.Fields() {
		if slices.ContainsFunc(carrierVars[:], func(n string) bool { return strings.EqualFold(n, f) }) {
			continue
		}
		if n := envName(f); !slices.Contains(names, n) {
			names = append(names[:len(names):len(names)], n)
		}
	}
	return names
}

// envName normalises a carrier key as envcar does (the OTel env-carrier
// rule): upper case, every byte outside [A-Z0-9_] replaced by "_", and a
// leading digit prefixed with "_".
func envName(key string) string {
	var b strings.Builder
	if key == "" || key[0] >= '0' && key[0] <= '9' {
		b.WriteByte('_')
	}
	for _, r := range key {
		switch {
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Command returns exec.CommandContext(ctx, name, args...) prepared to carry
// ctx's session: Env is c.Environ(ctx, os.Environ()), and when the session
// has a working directory (otelsession.Cwd) the child starts there, with
// PWD set to match as os/exec does when it builds the environment itself.
// Change Dir afterwards to start the child elsewhere (PWD then names the
// session's directory, which shells and os.Getwd ignore when it is not the
// real one). As with exec.CommandContext, ctx must not be nil, and the child
// is killed when ctx is done.
func (c Config) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.Environ(ctx, os.Environ())
	if dir := otelsession.Cwd(ctx); dir != "" {
		cmd.Dir = dir
		if filepath.IsAbs(dir) {
			// os/exec keeps the last of duplicate names.
			cmd.Env = append(cmd.Env, "PWD="+dir)
		}
	}
	return cmd
}

// FromEnvironment returns ctx carrying the session the parent process passed
// in this process's environment. Call it once at start-up, in a program
// started with [Command] or [Environ]; the result is what the session was in
// the parent's context, local fields, working directory and delegated-child
// mark included.
//
// It starts from otelsession.Reset(ctx), extracts the OTel carriers with
// c.Propagator through c.Inbound (propagation.Inbound.Extract, peer transport
// "env"), then binds the local fields from their legacy variables (present
// and empty is Cleared, absent is Unset), the working directory from CwdVar,
// and the delegated-child mark from DelegatedChildVar (any non-empty value,
// as in the original). Remote fields are read
// from BAGGAGE only; a field it leaves Unset still reads its legacy variable
// through otelsession.Getenv. It neither writes the environment nor latches
// otelsession.Engaged.
//
// When c.Inbound does not trust the parent, the parent's legacy variables
// are as unverified as an unsigned BAGGAGE, so none of them is taken: in the
// returned context otelsession.Getenv reads no session variable from the
// environment (an Unset field gives its default), Environ and Command pass
// none on to a grandchild unless the context binds it, and the local fields,
// the working directory and the delegated-child mark, which cannot be
// signed, are taken from their variables only when a session was accepted
// (its signature verified). Code that calls os.Getenv itself still sees
// whatever the parent wrote.
//
// Malformed input (a session member that is not valid baggage, an oversized
// or duplicated one, a value no parent could have written) returns a context
// whose session is wholly Unset and an error wrapping the reason:
// propagation's Err values for BAGGAGE, [ErrInvalidVariable] for the others.
// Trace context and baggage members that are not session fields are kept
// as the propagator extracted them.
func (c Config) FromEnvironment(ctx context.Context) (context.Context, error) {
	return c.fromEnvironment(ctx, os.LookupEnv, &envcar.Carrier{})
}

// fromEnvironment is FromEnvironment over any environment: lookup reads a
// variable, carrier holds the OTel carriers of the same environment. Tests
// and fuzzing give it a slice; FromEnvironment the process's own.
func (c Config) fromEnvironment(ctx context.Context, lookup func(string) (string, bool), carrier otelprop.TextMapCarrier) (context.Context, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var errs []error

	// The mark, like the local fields, is taken once the policy has judged
	// the parent (below); the session id comes from BAGGAGE like every field.
	delegated, _ := lookup(DelegatedChildVar)

	inbound := c.Inbound
	if inbound == nil {
		inbound = defaultInbound
	}
	peer := propagation.Peer{Transport: "env"}
	ctx, err := inbound.Extract(ctx, c.Propagator, carrier, peer)
	if err != nil {
		errs = append(errs, err)
	}
	trusted := inbound.Trusts(ctx, peer)
	if !trusted {
		ctx = fallback.WithEnv(ctx, distrustedParent{fallback.EnvFrom(ctx)})
	}

	// The local fields, the working directory and the delegated-child mark
	// cannot be signed. From a parent the policy distrusts they are read
	// only beside a session it accepted (its signature verified): without
	// one, nothing the parent wrote is taken.
	type binding struct {
		f     otelsession.Field
		value string
	}
	var locals []binding
	readLocals := trusted || err == nil && propagation.HasSession(baggage.FromContext(ctx))
	for _, spec := range otelsession.Specs() {
		if !readLocals || spec.Class != otelsession.ClassLocal || spec.Field == 0 {
			continue
		}
		if v, ok := lookup(spec.Env); ok {
			if _, err := otelsession.ValidateValue(spec, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w: %w", spec.Env, ErrInvalidVariable, err))
				continue
			}
			locals = append(locals, binding{spec.Field, v})
		}
	}
	var cwd string
	if readLocals {
		cwd, _ = lookup(CwdVar)
	}
	if cwdSpec, _ := otelsession.SpecOf(otelsession.CwdKey); cwd != "" {
		if _, err := otelsession.ValidateValue(cwdSpec, cwd); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w: %w", CwdVar, ErrInvalidVariable, err))
		}
	}
	if delegated != "" && readLocals {
		ctx = otelsession.WithDelegatedChild(ctx, "")
	}
	if len(errs) > 0 {
		return otelsession.Reset(ctx), fmt.Errorf("execsession: session from the parent process's environment: %w", errors.Join(errs...))
	}
	for _, l := range locals {
		ctx = otelsession.With(ctx, l.f, l.value)
	}
	if cwd != "" {
		ctx = otelsession.WithCwd(ctx, cwd)
	}
	return ctx, nil
}
