package readmecheck

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// block is one ```go block of the README.
type block struct {
	line int // of its first line of code, in the README
	code string
}

func goBlocks(t *testing.T, readme string) []block {
	t.Helper()
	var blocks []block
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		b := block{line: i + 2}
		var code []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			code = append(code, lines[i])
		}
		b.code = strings.Join(code, "\n")
		blocks = append(blocks, b)
	}
	return blocks
}

// packages are the imports a fragment may need, by the name it uses; a
// name with two candidates is given the second when the first lacks what
// the fragment uses (the README's propagation is sessionwire's, but for
// the one line that configures OpenTelemetry's).
var packages = map[string][]string{
	"context":      {"context"},
	"http":         {"net/http"},
	"slog":         {"log/slog"},
	"os":           {"os"},
	"time":         {"time"},
	"otel":         {"go.opentelemetry.io/otel"},
	"baggage":      {"go.opentelemetry.io/otel/baggage"},
	"trace":        {"go.opentelemetry.io/otel/trace"},
	"sdktrace":     {"go.opentelemetry.io/otel/sdk/trace"},
	"otelhttp":     {"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"},
	"otelgrpc":     {"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"},
	"grpc":         {"google.golang.org/grpc"},
	"nats":         {"github.com/nats-io/nats.go"},
	"jetstream":    {"github.com/nats-io/nats.go/jetstream"},
	"kgo":          {"github.com/twmb/franz-go/pkg/kgo"},
	"propagation":  {"github.com/sessionwire/sessionwire/propagation", "go.opentelemetry.io/otel/propagation"},
	"otelsession":  {"github.com/sessionwire/sessionwire/otelsession"},
	"sessiontrace": {"github.com/sessionwire/sessionwire/otelsession/sessiontrace"},
	"execsession":  {"github.com/sessionwire/sessionwire/propagation/execsession"},
	"grpcsession":  {"github.com/sessionwire/sessionwire/propagation/grpcsession"},
	"httpsession":  {"github.com/sessionwire/sessionwire/propagation/httpsession"},
	"kafkasession": {"github.com/sessionwire/sessionwire/propagation/kafkasession"},
	"natssession":  {"github.com/sessionwire/sessionwire/propagation/natssession"},
	"amqpsession":  {"github.com/sessionwire/sessionwire/propagation/amqpsession"},
}

// fragment is a block that is not a whole program, compiled as the body of
// a function, with the imports it needs.
type fragment struct {
	block
	imports map[string]int // name -> index of its candidate in packages
}

const fragmentHeader = 5 // lines of source before the fragment's first: package, blank, import, blank, func

func (f *fragment) source(fn string) string {
	var b strings.Builder
	b.WriteString("package main\n\nimport (")
	names := make([]string, 0, len(f.imports))
	for n := range f.imports {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, " %s %q;", n, packages[n][f.imports[n]])
	}
	fmt.Fprintf(&b, ")\n\nfunc %s() {\n%s\n}\n", fn, f.code)
	return b.String()
}

var (
	compileError   = regexp.MustCompile(`(?m)^\S*?(snippet|program)(\d+)\.go:(\d+):\d+: (.*)$`)
	undefinedName  = regexp.MustCompile(`^undefined: (\w+)$`)
	undefinedField = regexp.MustCompile(`^undefined: (\w+)\.\w+$`)
	unusedImport   = regexp.MustCompile(`^"([^"]+)" imported (as \w+ )?and not used$`)
	unusedVar      = regexp.MustCompile(`^declared and not used: (\w+)$`)
)

// Every Go block of the README compiles: a whole program as it is, a
// fragment as the body of a function, with the imports its names need and
// the variables it assumes (testdata/env.go.txt). A fragment may declare a
// variable only to show what a call returns ("declared and not used" is
// the one error it may leave: the compiler has checked every type by
// then). Any other error fails the test with the README's line.
func TestREADMECodeCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(t, string(readme))
	if len(blocks) < 5 {
		t.Fatalf("found %d Go blocks in the README; it has had at least 5", len(blocks))
	}
	dir := t.TempDir()
	virtual := filepath.Join(root, "internal", "readmecheck", "snippets")
	replace := map[string]string{filepath.Join(virtual, "fragments", "env.go"): filepath.Join(root, "internal", "readmecheck", "testdata", "env.go.txt")}
	var pkgs []string
	frags := map[int]*fragment{}
	for i, b := range blocks {
		if strings.HasPrefix(strings.TrimSpace(b.code), "package main") {
			real := filepath.Join(dir, fmt.Sprintf("program%d.go", i))
			if err := os.WriteFile(real, []byte(b.code+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			pkg := fmt.Sprintf("program%d", i)
			replace[filepath.Join(virtual, pkg, fmt.Sprintf("program%d.go", i))] = real
			pkgs = append(pkgs, "./internal/readmecheck/snippets/"+pkg)
			continue
		}
		frags[i] = &fragment{block: b, imports: map[string]int{}}
	}
	if len(frags) > 0 {
		pkgs = append(pkgs, "./internal/readmecheck/snippets/fragments")
	}
	overlay := filepath.Join(dir, "overlay.json")
	var out string
	// Each round adds the imports the compiler says are missing, or drops
	// those it says are unused, until the blocks compile or an error is left
	// that no round can mend.
	for round := 0; ; round++ {
		for i, f := range frags {
			real := filepath.Join(dir, fmt.Sprintf("snippet%d.go", i))
			if err := os.WriteFile(real, []byte(f.source(fmt.Sprintf("snippet%d", i))), 0o644); err != nil {
				t.Fatal(err)
			}
			replace[filepath.Join(virtual, "fragments", fmt.Sprintf("snippet%d.go", i))] = real
		}
		js, err := json.Marshal(map[string]any{"Replace": replace})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(overlay, js, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", append([]string{"build", "-gcflags=-e", "-overlay", overlay}, pkgs...)...)
		cmd.Dir = root
		b, err := cmd.CombinedOutput()
		if err == nil {
			return
		}
		out = string(b)
		if round == 10 {
			break
		}
		mended := false
		var left, shown []string
		switched := map[string]bool{}
		for _, m := range compileError.FindAllStringSubmatch(out, -1) {
			i, _ := strconv.Atoi(m[2])
			line, _ := strconv.Atoi(m[3])
			f, msg := frags[i], m[4]
			if m[1] == "program" || f == nil {
				left = append(left, fmt.Sprintf("README.md:%d: %s", blocks[i].line+line-1, msg))
				continue
			}
			if n := undefinedName.FindStringSubmatch(msg); n != nil && packages[n[1]] != nil {
				if _, have := f.imports[n[1]]; !have {
					f.imports[n[1]], mended = 0, true
				}
				continue // imported in this round, or an earlier one (another use of it)
			}
			if n := undefinedField.FindStringSubmatch(msg); n != nil {
				key := fmt.Sprint(i, n[1])
				if switched[key] {
					continue // another use of the name switched in this round
				}
				if c, have := f.imports[n[1]]; have && c+1 < len(packages[n[1]]) {
					f.imports[n[1]], mended, switched[key] = c+1, true, true
					continue
				}
			}
			if n := unusedImport.FindStringSubmatch(msg); n != nil {
				for name, c := range f.imports {
					if packages[name][c] == n[1] {
						delete(f.imports, name)
						mended = true
					}
				}
				continue
			}
			if unusedVar.MatchString(msg) {
				shown = append(shown, msg)
				continue
			}
			left = append(left, fmt.Sprintf("README.md:%d: %s", f.line+line-1-fragmentHeader, msg))
		}
		switch {
		case len(left) > 0:
			t.Fatalf("the README's Go code does not compile:\n%s", strings.Join(left, "\n"))
		case !mended && len(shown) > 0:
			t.Logf("compiles; variables declared only to show them: %s", strings.Join(shown, "; "))
			return
		case !mended:
			t.Fatalf("the README's Go code does not compile:\n%s", out)
		}
	}
	t.Fatalf("the README's Go code does not compile after 10 rounds of imports:\n%s", out)
}
