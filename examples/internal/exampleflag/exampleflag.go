package exampleflag

import (
	"flag"
	"fmt"
	"os"
)

// Parse sets the usage text of the program called name (about: what it does
// and what it prints, as a paragraph; examples: command lines, one each) and
// parses os.Args. Arguments that are not flags are refused.
func Parse(name, about string, examples ...string) {
	flag.Usage = func() { usage(name, about, examples) }
	flag.Parse()
	if flag.NArg() > 0 {
		Fail(name, "unexpected argument %q", flag.Arg(0))
	}
}

// Fail reports a command-line mistake, points at -h and exits with status 2.
func Fail(name, format string, args ...any) {
	fmt.Fprintf(flag.CommandLine.Output(), "%s: %s\nrun '%s -h' for the flags\n", name, fmt.Sprintf(format, args...), name)
	os.Exit(2)
}

func usage(name, about string, examples []string) {
	w := flag.CommandLine.Output()
	hasFlags := false
	flag.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintf(w, "usage: %s [flags]\n\n%s\n", name, about)
	} else {
		fmt.Fprintf(w, "usage: %s\n\n%s\n", name, about)
	}
	if len(examples) > 0 {
		fmt.Fprintln(w)
		for _, e := range examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	if hasFlags {
		fmt.Fprintln(w, "\nFlags:")
		flag.PrintDefaults()
	}
}
