package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sessionwire/sessionwire/otelsession"
)

func init() {
	register("fields", command{
		summary: "print the wire-key table: key, legacy variable, class, limit, signed, redaction",
		usage: `usage: sessionctl [--json] fields [--markdown]

Prints the wire-key table, every key of the session namespace as the code
declares it (otelsession.Specs): the legacy environment variable, the class
(identity: a bad value refuses the session; display: cut or dropped; local:
never leaves the process; control: the async-delivery capability and the
signature), the longest value in bytes, whether a signature covers it, what
spans and logs show of it by default, and whether Bind binds it and Clear
clears it. --markdown prints the table the README shows.

  sessionctl fields
  sessionctl fields --markdown`,
		flags: func(fs *flag.FlagSet) { fs.Bool("markdown", false, "print a Markdown table (the README's)") },
		run: func(e env) int {
			fs := flag.NewFlagSet("fields", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			markdown := fs.Bool("markdown", false, "")
			if err := fs.Parse(e.args); err != nil {
				return e.usageError("fields", "%v", err)
			}
			if fs.NArg() > 0 {
				return e.usageError("fields", "takes no arguments, got %q", fs.Args())
			}
			var err error
			switch {
			case e.asJSON:
				err = writeJSON(e.stdout, fieldRows())
			case *markdown:
				_, err = io.WriteString(e.stdout, fieldsMarkdown())
			default:
				err = printFields(e.stdout)
			}
			if err != nil {
				fmt.Fprintln(e.stderr, "sessionctl fields:", err)
				return exitUsage
			}
			return exitYes
		},
	})
}

// fieldRow is one row of the wire-key table, as printed.
type fieldRow struct {
	Key       string `json:"key"`
	Legacy    string `json:"legacy_variable,omitempty"`
	Class     string `json:"class"`
	MaxBytes  int    `json:"max_bytes"`
	Signed    bool   `json:"signed"`
	Redaction string `json:"redaction"`
	InSession bool   `json:"bound_by_bind"`
}

func fieldRows() []fieldRow {
	var rows []fieldRow
	for _, s := range otelsession.Specs() {
		rows = append(rows, fieldRow{Key: s.Key, Legacy: s.Env, Class: s.Class.String(), MaxBytes: s.MaxLen,
			Signed: s.Signed, Redaction: s.Redact.String(), InSession: s.InSession})
	}
	return rows
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func printFields(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tLEGACY VARIABLE\tCLASS\tMAX BYTES\tSIGNED\tON SPANS AND LOGS\tBIND/CLEAR")
	for _, r := range fieldRows() {
		legacy := r.Legacy
		if legacy == "" {
			legacy = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Key, legacy, r.Class, r.MaxBytes, yesNo(r.Signed), r.Redaction, yesNo(r.InSession))
	}
	return tw.Flush()
}

// fieldsMarkdown is the table in the README, between its markers; a test
// keeps the two equal.
func fieldsMarkdown() string {
	var b strings.Builder
	b.WriteString("| key | legacy variable | class | max bytes | signed | on spans and logs | `Bind` binds, `Clear` clears |\n")
	b.WriteString("| --- | --- | --- | ---: | --- | --- | --- |\n")
	for _, r := range fieldRows() {
		legacy := "—"
		if r.Legacy != "" {
			legacy = "`" + r.Legacy + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %d | %s | %s | %s |\n", r.Key, legacy, r.Class, r.MaxBytes, yesNo(r.Signed), r.Redaction, yesNo(r.InSession))
	}
	return b.String()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
