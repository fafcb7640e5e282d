// Command sessionctl decodes a session: a `baggage` header copied from a
// request, a span or a log line, a child process's BAGGAGE variable, or this
// process's own environment. It prints every session field with its state
// (unset, cleared, set) and value, then whether sessionwire's inbound policy
// would accept it, and why not.
//
//	sessionctl header 'session.platform=telegram,session.thread_id=%00'
//	sessionctl header "$LINE1" "$LINE2"     # several baggage header lines
//	sessionctl env                          # BAGGAGE and HERMES_* of this process
//	sessionctl env 'session.chat_id=42'     # a BAGGAGE value, with this process's HERMES_*
//	sessionctl --json header '...'          # for scripts
//	sessionctl trace --jaeger http://127.0.0.1:16686 --thread T   # a conversation's journey through Jaeger
//
// Exit status: 0 when the session would be accepted, 1 when it would be
// refused, 2 on a usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

func main() {
	// The policy reports refusals to the OTel error handler too; here they
	// are the output itself, so the handler stays quiet.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
}

const usage = `usage: sessionctl [--json] header LINE [LINE...]
       sessionctl [--json] env [BAGGAGE-VALUE]
       sessionctl trace --jaeger URL [--chat C | --thread T | --session KEY] [--check] [--html FILE]

Decodes a session and prints each field's state and value, then whether the
inbound policy would accept it.`

// fieldReport is one row of the output.
type fieldReport struct {
	Name   string  `json:"name"`
	Key    string  `json:"key"`
	Scope  string  `json:"scope"`
	Class  string  `json:"class"` // from the wire-key table: identity, display, local
	State  string  `json:"state"`
	Value  string  `json:"value,omitempty"`
	Legacy *string `json:"legacy_env,omitempty"` // env mode: the HERMES_* variable, when present
}

type report struct {
	Source   string        `json:"source"`
	Fields   []fieldReport `json:"fields"`
	Foreign  []string      `json:"foreign_members,omitempty"`
	Accepted bool          `json:"accepted"`
	Problems []string      `json:"problems,omitempty"` // why the policy refuses it
	Warnings []string      `json:"warnings,omitempty"` // disagreements that do not refuse it
}

func run(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	if len(args) > 0 && args[0] == "trace" { // the session explorer, trace.go
		return runTrace(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("sessionctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage) }
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return 2
	}
	var lines []string
	var legacy func(string) (string, bool)
	switch rest[0] {
	case "header":
		if len(rest) < 2 {
			fmt.Fprintln(stderr, "sessionctl: header needs at least one baggage header value")
			return 2
		}
		lines = rest[1:]
	case "env":
		switch len(rest) {
		case 1:
			if v, ok := lookupEnv("BAGGAGE"); ok {
				lines = []string{v}
			}
		case 2:
			lines = []string{rest[1]}
		default:
			fmt.Fprintln(stderr, "sessionctl: env takes at most one BAGGAGE value")
			return 2
		}
		legacy = lookupEnv
	default:
		fmt.Fprintf(stderr, "sessionctl: unknown source %q (want header or env)\n", rest[0])
		return 2
	}

	r := decode(rest[0], lines, legacy)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(stderr, "sessionctl: write JSON:", err)
			return 2
		}
	} else if err := printTable(stdout, r); err != nil {
		fmt.Fprintln(stderr, "sessionctl: write table:", err)
		return 2
	}
	if !r.Accepted {
		return 1
	}
	return 0
}

func decode(source string, lines []string, legacy func(string) (string, bool)) report {
	r := report{Source: source, Accepted: true}

	// What the header holds, as the stock OTel parser reads it.
	var members []baggage.Member
	for i, line := range lines {
		b, err := baggage.Parse(line)
		if err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("line %d: %v", i+1, err))
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
	if _, err := policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(h),
		propagation.Peer{Transport: "sessionctl"}); err != nil {
		r.Accepted = false
		for _, e := range unjoin(err) {
			r.Problems = append(r.Problems, e.Error())
		}
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
			if lv, ok := legacy(f.Name()); ok {
				row.Legacy = &lv
				if st == otelsession.Set && lv != v || st == otelsession.Cleared && lv != "" {
					r.Warnings = append(r.Warnings, fmt.Sprintf("%s: the environment variable %s disagrees with BAGGAGE", f.Key(), f.Name()))
				}
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

func printTable(w io.Writer, r report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	withLegacy := r.Source == "env"
	if withLegacy {
		fmt.Fprintln(tw, "KEY\tCLASS\tSTATE\tVALUE\tENVIRONMENT")
	} else {
		fmt.Fprintln(tw, "KEY\tCLASS\tSTATE\tVALUE")
	}
	for _, f := range r.Fields {
		value := fmt.Sprintf("%q", f.Value)
		if f.State != "set" {
			value = "-"
		}
		if withLegacy {
			env := "(absent)"
			if f.Legacy != nil {
				env = fmt.Sprintf("%q", *f.Legacy)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Key, f.Class, f.State, value, env)
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
	if r.Accepted {
		fmt.Fprintln(w, "\ninbound policy: accepted (from a trusted peer)")
	} else {
		fmt.Fprintln(w, "\ninbound policy: refused; the receiver would see no session")
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintln(w, "\nwarnings:")
	}
	for _, p := range r.Warnings {
		fmt.Fprintf(w, "  - %s\n", p)
	}
	return nil
}
