// Command sessionctl is the operator's tool for sessionwire sessions. It
// decodes a session (a `baggage` header copied from a request, a span or a
// log line, a child process's BAGGAGE variable, or this process's own
// environment), says whether sessionwire's inbound policy would accept it
// and why not, checks a session's signature with a key, and prints the
// wire-key table.
//
//	sessionctl header 'session.platform=telegram,session.thread_id=%00'
//	sessionctl header "$LINE1" "$LINE2"     # several baggage header lines
//	sessionctl env                          # BAGGAGE and HERMES_* of this process
//	sessionctl env 'session.chat_id=42'     # a BAGGAGE value, with this process's HERMES_*
//	sessionctl verify --key-env SESSIONWIRE_SIGNING_KEY "$HEADER"
//	sessionctl fields                       # the wire-key table
//	sessionctl --json header '...'          # for scripts
//	sessionctl trace --jaeger http://127.0.0.1:16686 --thread T   # a conversation's journey through Jaeger
//
// Exit status, the same for every subcommand: 0 when the answer is yes (the
// session would be accepted, the signature verifies, the table was printed),
// 1 when it is no (refused, no session at all, input that is not baggage, a
// signature that fails), 2 when the command itself was wrong (unknown
// subcommand or flag, missing argument, unreadable key).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"go.opentelemetry.io/otel"
)

// The exit statuses every subcommand shares (see the package comment).
const (
	exitYes   = 0
	exitNo    = 1
	exitUsage = 2
)

func main() {
	// The policy reports refusals to the OTel error handler too; here they
	// are the output itself, so the handler stays quiet.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	os.Exit(runWith(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv))
}

// env is what a subcommand runs with: its arguments after the subcommand's
// name, where it writes, and the process environment (injected for tests).
type env struct {
	args      []string
	asJSON    bool
	stdin     io.Reader // what "-" reads
	stdout    io.Writer
	stderr    io.Writer
	lookupEnv func(string) (string, bool)
}

// command is one subcommand. Each lives in its own file and registers
// itself in init, so that adding one touches no other file.
type command struct {
	summary string              // one line for the overview
	usage   string              // the subcommand's own usage lines
	run     func(e env) int     // returns an exit status
	flags   func(*flag.FlagSet) // optional: declares the subcommand's flags (for --help)
}

var commands = map[string]command{}

func register(name string, c command) {
	if _, dup := commands[name]; dup {
		panic("sessionctl: subcommand " + name + " registered twice")
	}
	commands[name] = c
}

func overview() string {
	var b strings.Builder
	b.WriteString("usage: sessionctl [--json] COMMAND [ARGS...]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-8s %s\n", n, commands[n].summary)
	}
	b.WriteString(`
Options:
  --json   print JSON instead of text (every command)
  --help   this text; "sessionctl COMMAND --help" for one command

Exit status, the same for every command:
  0  yes: the session would be accepted, the signature verifies, the table was printed
  1  no: the session would be refused, there is no session, the input is not baggage,
     or the signature does not verify (the output says why)
  2  the command line is wrong: unknown command or flag, missing argument,
     unreadable key (nothing was judged)
`)
	return b.String()
}

// run is runWith with nothing on standard input.
func run(args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	return runWith(args, strings.NewReader(""), stdout, stderr, lookupEnv)
}

func runWith(args []string, stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	fs := flag.NewFlagSet("sessionctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, overview())
			return exitYes
		}
		fmt.Fprintf(stderr, "sessionctl: %v\n\n%s", err, overview())
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprintf(stderr, "sessionctl: no command given\n\n%s", overview())
		return exitUsage
	}
	if rest[0] == "help" {
		fmt.Fprint(stdout, overview())
		return exitYes
	}
	c, ok := commands[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "sessionctl: unknown command %q\n\n%s", rest[0], overview())
		return exitUsage
	}
	sub := rest[1:]
	// --json may also follow the command's name.
	if i := slices.Index(sub, "--json"); i >= 0 {
		*asJSON = true
		sub = slices.Delete(slices.Clone(sub), i, i+1)
	}
	if slices.Contains(sub, "--help") || slices.Contains(sub, "-h") {
		fmt.Fprintf(stdout, "%s\n", c.usage)
		if c.flags != nil {
			fs := flag.NewFlagSet(rest[0], flag.ContinueOnError)
			c.flags(fs)
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "\nFlags:")
			fs.PrintDefaults()
		}
		return exitYes
	}
	return c.run(env{args: sub, asJSON: *asJSON, stdin: stdin, stdout: stdout, stderr: stderr, lookupEnv: lookupEnv})
}

// maxInput bounds what "-" reads from standard input: far more than the W3C
// limits allow a header (8192 bytes), so that a line too long is judged and
// refused, not cut.
const maxInput = 1 << 20

// inputLines returns the header lines cmd judges: args, or, when args is
// the single "-", the non-empty lines of standard input (a log's lines, a
// header pasted from a request). ok is false, and the usage error printed,
// when there is none.
func (e env) inputLines(cmd string, args []string) (lines []string, code int, ok bool) {
	if len(args) != 1 || args[0] != "-" {
		if len(args) == 0 {
			return nil, e.usageError(cmd, "give at least one baggage header line, or - to read them from standard input"), false
		}
		return args, 0, true
	}
	b, err := io.ReadAll(io.LimitReader(e.stdin, maxInput+1))
	switch {
	case err != nil:
		return nil, e.usageError(cmd, "read standard input: %v", err), false
	case len(b) > maxInput:
		return nil, e.usageError(cmd, "standard input holds more than %d bytes; a baggage header holds at most 8192", maxInput), false
	}
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimRight(line, "\r\n"); strings.TrimSpace(line) != "" {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return nil, e.usageError(cmd, "standard input holds no line to judge"), false
	}
	return lines, 0, true
}

// headerValue returns the value of a header line pasted whole, with its
// name ("baggage:", in any case) removed, and the marker curl -v puts before
// the headers it sends or receives ("> ", "< "). A baggage key is a token,
// which never holds a colon: no line a parser could read loses anything.
// named reports whether there was a name to remove.
func headerValue(line string) (value string, named bool) {
	v := strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(v, "> "); ok {
		v = rest
	} else if rest, ok := strings.CutPrefix(v, "< "); ok {
		v = rest
	}
	const name = "baggage:"
	if len(v) >= len(name) && strings.EqualFold(v[:len(name)], name) {
		return strings.TrimSpace(v[len(name):]), true
	}
	return line, false
}

// usageError reports a wrong command line and returns exitUsage.
func (e env) usageError(cmd, format string, a ...any) int {
	fmt.Fprintf(e.stderr, "sessionctl %s: %s\n\n%s\n", cmd, fmt.Sprintf(format, a...), commands[cmd].usage)
	return exitUsage
}
