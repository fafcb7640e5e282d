package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

func init() {
	register("header", command{
		summary: "decode baggage header lines and judge them as the inbound policy would",
		usage: `usage: sessionctl [--json] header (LINE [LINE...] | -)

Decodes one or more baggage header lines (as copied from a request, a span or
a log line) and prints every session field's state (unset, cleared, set) and
value, then whether sessionwire's inbound policy, from a trusted peer, would
accept the session, and why not. Exit status 0 only when it would be accepted.

A line may keep its header name ("baggage: ...", as curl -v prints it); "-"
reads the lines from standard input.

  sessionctl header 'session.platform=telegram,session.thread_id=%00,session.chat_id=-100123'
  grep -o 'baggage: .*' request.log | sessionctl header -`,
		run: func(e env) int {
			lines, code, ok := e.inputLines("header", e.args)
			if !ok {
				return code
			}
			return e.print(decode("header", lines, nil))
		},
	})
	register("env", command{
		summary: "the session this process would see: BAGGAGE, HERMES_* and the effective value of each field",
		usage: `usage: sessionctl [--json] env [BAGGAGE-VALUE]

Shows the session a child process started with this environment would see:
the BAGGAGE variable (or the value given) as the inbound policy judges it,
each field's legacy variable (HERMES_*) beside its wire key, and the
effective value a read by legacy name returns (otelsession.Getenv): the
BAGGAGE value when the field is set or cleared there, else the environment's
variable (the fallback), else nothing. Exit status 0 only when BAGGAGE holds a
session the policy accepts.

  sessionctl env
  sessionctl env 'session.chat_id=42,session.thread_id=%00'`,
		run: func(e env) int {
			var lines []string
			switch len(e.args) {
			case 0:
				if v, ok := e.lookupEnv("BAGGAGE"); ok {
					lines = []string{v}
				}
			case 1:
				lines = e.args
			default:
				return e.usageError("env", "takes at most one BAGGAGE value, got %d arguments", len(e.args))
			}
			return e.print(decode("env", lines, e.lookupEnv))
		},
	})
}

// The verdicts of a decoded session. Only the first is a yes.
const (
	verdictAccepted   = "accepted"
	verdictRefused    = "refused"
	verdictNoSession  = "no session"
	verdictNotBaggage = "not baggage"
)

// fieldReport is one row of the output.
type fieldReport struct {
	Name   string  `json:"name"` // the legacy environment variable
	Key    string  `json:"key"`
	Scope  string  `json:"scope"`
	Class  string  `json:"class"` // from the wire-key table: identity, display, local
	State  string  `json:"state"` // in the input: unset, cleared, set
	Value  string  `json:"value,omitempty"`
	Legacy *string `json:"legacy_env,omitempty"` // env mode: the HERMES_* variable, when present
	// Env mode: what otelsession.Getenv returns by the legacy name, and from
	// where: "baggage" (set or cleared there), "environment" (the fallback)
	// or "none".
	Effective       *string `json:"effective,omitempty"`
	EffectiveSource string  `json:"effective_source,omitempty"`
}

type report struct {
	Source   string        `json:"source"`
	Fields   []fieldReport `json:"fields"`
	Foreign  []string      `json:"foreign_members,omitempty"`
	Verdict  string        `json:"verdict"` // accepted, refused, no session, not baggage
	Accepted bool          `json:"accepted"`
	Problems []string      `json:"problems,omitempty"` // why it is not accepted
	Warnings []string      `json:"warnings,omitempty"` // disagreements that do not refuse it
	Notes    []string      `json:"notes,omitempty"`    // how the input was read
}

// headerValues returns lines without the header names pasted with them
// (headerValue), and a note for each line that had one.
func headerValues(lines []string) (values, notes []string) {
	values = make([]string, len(lines))
	for i, l := range lines {
		var named bool
		if values[i], named = headerValue(l); named {
			notes = append(notes, fmt.Sprintf("line %d: read as the value of its header (the name \"baggage:\" is not part of it)", i+1))
		}
	}
	return values, notes
}

// lookupEnv adapts a lookup function to the fallback layer, so that the
// effective values come from otelsession.Getenv itself.
type lookupEnv func(string) (string, bool)

func (l lookupEnv) LookupEnv(k string) (string, bool) { return l(k) }
func (l lookupEnv) Setenv(string, string) error {
	return errors.New("sessionctl reads the environment only")
}

func decode(source string, lines []string, legacy func(string) (string, bool)) report {
	r := report{Source: source}
	lines, r.Notes = headerValues(lines)

	// What the input holds, as the stock OTel parser reads it. The parser
	// skips a member it cannot read and keeps the others; a line of which
	// it can read nothing is not baggage at all.
	var members []baggage.Member
	notBaggage := false
	for i, line := range lines {
		if strings.TrimSpace(line) == "" {
			r.Problems = append(r.Problems, fmt.Sprintf("line %d is empty", i+1))
			continue
		}
		b, err := baggage.Parse(line)
		switch {
		case err != nil && b.Len() == 0:
			notBaggage = true
			r.Problems = append(r.Problems, fmt.Sprintf("line %d is not baggage: %v", i+1, err))
		case err != nil:
			r.Warnings = append(r.Warnings, fmt.Sprintf("line %d: the parser skips what it cannot read and keeps the rest: %v", i+1, err))
		}
		members = append(members, b.Members()...)
	}
	raw, _ := baggage.New(members...)
	ctx := baggage.ContextWithBaggage(context.Background(), raw)
	for _, m := range raw.Members() {
		if !otelsession.OwnedKey(m.Key()) { // the session namespace, in any spelling, is not "other"
			r.Foreign = append(r.Foreign, m.Key())
		}
	}

	// What the inbound policy makes of it, from a peer it trusts.
	h := http.Header{}
	for _, l := range lines {
		h.Add("baggage", l)
	}
	policy := propagation.NewInbound(propagation.TrustAll)
	got, err := policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(h),
		propagation.Peer{Transport: "sessionctl"})
	switch {
	case err != nil:
		r.Verdict = verdictRefused
		for _, e := range unjoin(err) {
			r.Problems = append(r.Problems, e.Error())
		}
	case notBaggage && raw.Len() == 0:
		r.Verdict = verdictNotBaggage
	case !propagation.HasSession(baggage.FromContext(got)):
		r.Verdict = verdictNoSession
		switch {
		case len(lines) == 0:
			r.Problems = append(r.Problems, "there is no BAGGAGE variable")
		case raw.Len() == 0:
			r.Problems = append(r.Problems, "the input holds no baggage member")
		default:
			r.Problems = append(r.Problems, "the input holds no session member (session.*)")
		}
	default:
		r.Verdict, r.Accepted = verdictAccepted, true
		// A line that is not baggage beside one that holds the session
		// does not refuse it: say so among the warnings.
		r.Warnings, r.Problems = append(r.Problems, r.Warnings...), nil
	}

	var fb context.Context
	if legacy != nil {
		fb = fallback.WithEnv(got, lookupEnv(legacy))
	}
	otelsession.Range(ctx, func(f otelsession.Field, v string, st otelsession.State) bool {
		if f.Scope() == otelsession.Local {
			// Local fields are never read from baggage; show a forged member.
			if m := raw.Member(f.Key()); m.Key() != "" {
				v, st = m.Value(), otelsession.Set
			}
		}
		row := fieldReport{Name: f.Name(), Key: f.Key(), Scope: f.Scope().String(), Class: f.Class().String(), State: st.String(), Value: v}
		if legacy != nil {
			lv, present := legacy(f.Name())
			if present {
				row.Legacy = &lv
				if st == otelsession.Set && lv != v || st == otelsession.Cleared && lv != "" {
					r.Warnings = append(r.Warnings, fmt.Sprintf("%s: the environment variable %s disagrees with BAGGAGE", f.Key(), f.Name()))
				}
			}
			eff := otelsession.Getenv(fb, f.Name(), "")
			row.Effective = &eff
			if _, bound := otelsession.Lookup(got, f); bound != otelsession.Unset {
				row.EffectiveSource = "baggage"
			} else if present {
				row.EffectiveSource = "environment"
			} else {
				row.EffectiveSource, row.Effective = "none", nil
			}
		}
		r.Fields = append(r.Fields, row)
		return true
	})
	return r
}

// unjoin flattens errors.Join trees so each problem prints on its own line.
func unjoin(err error) []error {
	var u interface{ Unwrap() []error }
	if errors.As(err, &u) {
		var out []error
		for _, e := range u.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

// print writes the report and returns the exit status it stands for.
func (e env) print(r report) int {
	var err error
	if e.asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		err = printTable(e.stdout, r)
	}
	if err != nil {
		fmt.Fprintln(e.stderr, "sessionctl: write the report:", err)
		return exitUsage
	}
	if !r.Accepted {
		return exitNo
	}
	return exitYes
}

func printTable(w io.Writer, r report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	withLegacy := r.Source == "env"
	if withLegacy {
		fmt.Fprintln(tw, "KEY\tLEGACY VARIABLE\tCLASS\tBAGGAGE\tENVIRONMENT\tEFFECTIVE")
	} else {
		fmt.Fprintln(tw, "KEY\tCLASS\tSTATE\tVALUE")
	}
	for _, f := range r.Fields {
		value := fmt.Sprintf("%q", f.Value)
		if f.State != "set" {
			value = "-"
		}
		if withLegacy {
			bag := f.State
			if f.State == "set" {
				bag = value
			}
			env := "(absent)"
			if f.Legacy != nil {
				env = fmt.Sprintf("%q", *f.Legacy)
			}
			eff := "(none)"
			if f.Effective != nil {
				eff = fmt.Sprintf("%q from %s", *f.Effective, f.EffectiveSource)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Key, f.Name, f.Class, bag, env, eff)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Key, f.Class, f.State, value)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Foreign) > 0 {
		fmt.Fprintf(w, "\nother baggage members: %s\n", strings.Join(r.Foreign, ", "))
	}
	switch r.Verdict {
	case verdictAccepted:
		fmt.Fprintln(w, "\ninbound policy: accepted (from a trusted peer)")
	case verdictRefused:
		fmt.Fprintln(w, "\ninbound policy: not accepted, refused; the receiver would see no session")
	case verdictNotBaggage:
		fmt.Fprintln(w, "\ninbound policy: not accepted; the input is not baggage (a W3C baggage header is key=value[,key=value...])")
	case verdictNoSession:
		fmt.Fprintln(w, "\ninbound policy: not accepted; there is no session to accept")
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
	if r.Source == "env" && !r.Accepted {
		fmt.Fprintln(w, "  (the EFFECTIVE column shows what a read by legacy name falls back to: the environment's variables)")
	}
	printSection(w, "warnings", r.Warnings)
	printSection(w, "notes", r.Notes)
	return nil
}

// printSection prints items under a title of their own, or nothing when
// there are none.
func printSection(w io.Writer, title string, items []string) {
	if len(items) > 0 {
		fmt.Fprintf(w, "\n%s:\n", title)
	}
	for _, p := range items {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}
