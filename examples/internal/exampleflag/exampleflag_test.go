package exampleflag

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// asProgram is set in the child process that plays an example program.
const asProgram = "EXAMPLEFLAG_TEST_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(asProgram) != "" {
		program()
		return
	}
	os.Exit(m.Run())
}

// program is a small example: one flag, a check of its value.
func program() {
	os.Args = append([]string{"demo"}, strings.Fields(os.Getenv(asProgram))[1:]...)
	// A fresh command line without the test binary's flags, wired to
	// flag.Usage as the flag package wires its own.
	flag.CommandLine = flag.NewFlagSet("demo", flag.ExitOnError)
	flag.CommandLine.Usage = func() { flag.Usage() }
	n := flag.Int("n", 3, "how many")
	Parse("demo", "Does a demonstration.", "demo -n 5")
	if *n < 1 {
		Fail("demo", "-n must be at least 1")
	}
	os.Stdout.WriteString("ran\n")
}

// run runs the program with args and returns what it printed and its exit
// status.
func run(t *testing.T, args string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), asProgram+"=demo "+args)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return string(out), 0
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		args   string
		status int
		says   []string
		notRun bool
	}{
		{"", 0, []string{"ran"}, false},
		{"-n 5", 0, []string{"ran"}, false},
		{"-h", 0, []string{"usage: demo [flags]", "Does a demonstration.", "  demo -n 5", "Flags:", "-n int", "how many (default 3)"}, true},
		{"--help", 0, []string{"usage: demo [flags]"}, true},
		{"-x", 2, []string{"flag provided but not defined: -x", "usage: demo [flags]"}, true},
		{"stray", 2, []string{`demo: unexpected argument "stray"`, "run 'demo -h' for the flags"}, true},
		{"-n 0", 2, []string{"demo: -n must be at least 1", "run 'demo -h' for the flags"}, true},
	} {
		out, status := run(t, c.args)
		if status != c.status {
			t.Errorf("demo %s: exit status %d, want %d; it printed:\n%s", c.args, status, c.status, out)
		}
		for _, s := range c.says {
			if !strings.Contains(out, s) {
				t.Errorf("demo %s does not say %q; it printed:\n%s", c.args, s, out)
			}
		}
		if c.notRun && strings.Contains(out, "ran") {
			t.Errorf("demo %s ran anyway:\n%s", c.args, out)
		}
	}
}
