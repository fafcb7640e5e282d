package main

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestPairedRatioIsTheMedianOfEachRoundsRatio(t *testing.T) {
	// Round 2 ran while something else loaded the machine: both sides are
	// slow in it. Dividing the medians would mix rounds; each round's own
	// ratio does not.
	row := &result{cpu: []float64{110, 300, 111, 109, 112}}
	base := &result{cpu: []float64{100, 280, 100, 100, 100}}
	if got := pairedRatio(row, base); math.Abs(got-1.10) > 1e-9 {
		t.Errorf("pairedRatio = %v, want 1.10", got)
	}
	if got := pairedDelta(row, base); got != 11 {
		t.Errorf("pairedDelta = %v, want 11", got)
	}
	// Wall time when a benchmark reports no CPU time.
	if got := pairedRatio(&result{ns: []float64{3, 3}}, &result{ns: []float64{2, 2}}); got != 1.5 {
		t.Errorf("pairedRatio of wall times = %v, want 1.5", got)
	}
	// Rounds that do not pair fall back to the ratio of the medians.
	if got := pairedRatio(&result{cpu: []float64{4, 6, 5}}, &result{cpu: []float64{2, 2}}); got != 2.5 {
		t.Errorf("pairedRatio of unpaired rounds = %v, want 2.5", got)
	}
}

func TestCumulativeReadsPprofTop(t *testing.T) {
	top := []byte(`File: x.test
Type: cpu
Showing nodes accounting for 2.15s, 75.70% of 2.84s total
      flat  flat%   sum%        cum   cum%
     0.02s  0.19%  0.19%      7.60s 71.43%  github.com/sessionwire/sessionwire/otelsession.bindBuilt
         0     0%  0.19%      980ms 10.00%  go.opentelemetry.io/otel/baggage.Baggage.Members
     0.01s  0.35%  4.23%        1us  0.01%  sync/atomic.(*Pointer[go.shape.struct { a string; b int }]).Store (inline)
`)
	cum := cumulative(top)
	if len(cum) != 3 {
		t.Fatalf("read %d functions, want 3: %+v", len(cum), cum)
	}
	for _, c := range []struct {
		re   string
		want float64
	}{
		{`otelsession\.bindBuilt$`, 7.60},
		{`Baggage\.Members$`, 0.98},
		{`atomic\.\(\*Pointer\[go\.shape\.struct \{ a string; b int \}\]\)\.Store \(inline\)$`, 1e-6},
	} {
		got, ok := first(cum, c.re)
		if !ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("first(%s) = %v, %v; want %v", c.re, got, ok, c.want)
		}
	}
	if _, ok := first(cum, `nowhere`); ok {
		t.Error("a function absent from the listing was found")
	}
}

// A row may sit beside a baseline of another package (the Python original's
// bind beside Bind): the rounds still pair, and a result that reports no
// memory leaves its columns blank rather than claiming 0.
func TestRenderPairsARowWithABaselineOfAnotherPackage(t *testing.T) {
	results := map[string]*result{
		"otelsession BenchmarkBind/x": {cpu: []float64{300, 900, 310}, bytes: []float64{96, 96, 96}, allocs: []float64{3, 3, 3}},
		"python BenchmarkPy/bind":     {cpu: []float64{3000, 9000, 3100}},
	}
	tb := table{id: "t", baseHeader: "python", compare: ratio, rows: []row{
		{"py", "python", "BenchmarkPy/bind", "", ""},
		{"go beside py", "otelsession", "BenchmarkBind/x", "BenchmarkPy/bind", "python"},
	}}
	got, err := render(tb, results)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| py | 3,100 |  |  | | |\n", "| go beside py | 310 | 96 | 3 | 3,100 | 0.10× |\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	tb.rows[1].basePkg = "elsewhere"
	if _, err := render(tb, results); err == nil || !strings.Contains(err.Error(), "in elsewhere") {
		t.Errorf("a baseline missing from its package gave %v", err)
	}
}

// A whole call's table shows wall time beside CPU time, and the rounds'
// lowest and highest comparison beside the median: the lowest is the
// round whose own ratio was lowest, not the lowest times of row and
// baseline taken from different rounds.
func TestRenderShowsWallTimeAndTheRoundsSpread(t *testing.T) {
	results := map[string]*result{
		"g BenchmarkUnary/raw":  {cpu: []float64{100, 200, 100}, ns: []float64{80, 90, 85}, bytes: []float64{10, 10, 10}, allocs: []float64{1, 1, 1}},
		"g BenchmarkUnary/edge": {cpu: []float64{90, 260, 150}, ns: []float64{70, 95, 99}, bytes: []float64{8, 8, 8}, allocs: []float64{1, 1, 1}},
	}
	tb := table{id: "grpc", baseHeader: "raw", compare: pct, wall: true, spread: true, rows: []row{
		{"raw", "g", "BenchmarkUnary/raw", "", ""},
		{"edge", "g", "BenchmarkUnary/edge", "BenchmarkUnary/raw", ""},
	}}
	got, err := render(tb, results)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| operation | ns/op | wall ns/op | B/op | allocs/op | raw, ns/op | vs. it (median; lowest and highest round) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
		"| raw | 100 | 85.0 | 10 | 1 | | |\n",
		// Ratios by round: 0.90, 1.30, 1.50.
		"| edge | 150 | 95.0 | 8 | 1 | 100 | +30% (-10% to +50%) |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
}

func TestScriptArgsReadBenchtimeAsGoTestDoes(t *testing.T) {
	for _, tc := range []struct {
		benchtime string
		want      []string
	}{
		{"0.2s", []string{"-benchtime", "0.2"}},
		{"1500ms", []string{"-benchtime", "1.5"}},
		{"1x", []string{"-count", "1"}},
		{"100x", []string{"-count", "100"}},
	} {
		got, err := scriptArgs(tc.benchtime)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("scriptArgs(%q) = %q, %v; want %q", tc.benchtime, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "x", "0x", "-3x", "1.5x", "10", "0s", "-1s", "fast"} {
		if got, err := scriptArgs(bad); err == nil || !strings.Contains(err.Error(), "-benchtime") {
			t.Errorf("scriptArgs(%q) = %q, %v; want an error naming -benchtime", bad, got, err)
		}
	}
}

// The script runs with both forms of -benchtime, as CI's smoke run (1x) and
// a measuring run (a duration) pass them, and prints lines parse reads.
func TestPythonOriginalRunsWithEitherBenchtime(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI must run the Python original's benchmark: install Debian's python3", err)
		}
		t.Skipf("%v: the Python original's benchmark runs on python3 (install it to run this test)", err)
	}
	script := strings.TrimPrefix(pythonBench, "internal/cmd/perftables/")
	for _, benchtime := range []string{"1x", "3x", "1ms"} {
		out, err := runScript(python, script, benchtime, 1)
		if err != nil {
			t.Fatalf("-benchtime %s: %v", benchtime, err)
		}
		results := map[string]*result{}
		parse("python", out, results)
		for _, name := range []string{"set_session_vars", "19_ContextVar_set_alone", "get_session_env", "set_session_vars_beside_live_heap"} {
			r := results["python BenchmarkPythonOriginal/"+name]
			if r == nil || len(r.ns) != 1 || r.ns[0] <= 0 || len(r.cpu) != 1 {
				t.Errorf("-benchtime %s: %s not read from\n%s", benchtime, name, out)
			}
		}
	}
	if _, err := runScript(python, script, "1y", 1); err == nil {
		t.Error("-benchtime 1y ran the script; want an error")
	}
}

// Each round's script hashes with the seed runScript is given, whatever
// PYTHONHASHSEED the environment of perftables holds: the Python original's
// cost depends on it.
func TestRunScriptSetsTheHashSeed(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("%v: the script runs on python3 (install it to run this test)", err)
	}
	t.Setenv("PYTHONHASHSEED", "random")
	script := filepath.Join(t.TempDir(), "seed.py")
	// It prints the seed as a benchmark line, and the hash of a string,
	// which is the same in two processes only when they share a seed.
	src := "import os\nprint('BenchmarkSeed/' + os.environ['PYTHONHASHSEED'], 1, hash('sessionwire'), 'ns/op')\n"
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(seed int) string {
		out, err := runScript(python, script, "1x", seed)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	a, b, c := run(3), run(3), run(4)
	if !strings.HasPrefix(a, "BenchmarkSeed/3 ") || !strings.HasPrefix(c, "BenchmarkSeed/4 ") {
		t.Fatalf("the script saw %q and %q; want seeds 3 and 4", a, c)
	}
	if a != b {
		t.Errorf("two runs with seed 3 hashed differently: %q, %q", a, b)
	}
	if strings.Fields(a)[2] == strings.Fields(c)[2] {
		t.Errorf("seeds 3 and 4 hashed alike: %q, %q", a, c)
	}
}

func TestHeapMismatchesNamesRowsBesideUnlikeLiveHeaps(t *testing.T) {
	if got := markPerByte(0); got != 0 {
		t.Errorf("markPerByte(0) = %v, want 0", got)
	}
	for _, mib := range []float64{2, 4, 64} {
		if got := markPerByte(mib * (1 << 20)); math.Abs(got-1) > 1e-9 {
			t.Errorf("markPerByte(%v MiB) = %v, want 1", mib, got)
		}
	}
	// The first row of the tables whose baseline is in its own package.
	var r row
	for _, tb := range tables {
		for _, x := range tb.rows {
			if x.base != "" && x.basePkg == "" && r.name == "" {
				r = x
			}
		}
	}
	if r.name == "" {
		t.Fatal("no row with a baseline of its own package")
	}
	const mib = 1 << 20
	results := func(rowLive, baseLive, rowBytes float64) map[string]*result {
		return map[string]*result{
			r.pkg + " " + r.name: {cpu: []float64{2, 2, 2}, bytes: []float64{rowBytes, rowBytes, rowBytes}, live: []float64{rowLive, rowLive, rowLive}},
			r.pkg + " " + r.base: {cpu: []float64{1, 1, 1}, bytes: []float64{900, 900, 900}, live: []float64{baseLive, baseLive, baseLive}},
		}
	}
	// sessiontrace's span rows before the fix: the baseline beside 4 MiB
	// of bound sessions, the row after them beside almost nothing.
	got := heapMismatches(results(0.1*mib, 4*mib, 1300))
	if len(got) != 1 || !strings.Contains(got[0], r.name) || !strings.Contains(got[0], "0.1 MiB") || !strings.Contains(got[0], "4.0 MiB") {
		t.Errorf("heapMismatches = %q, want the row named with both heaps", got)
	}
	for _, c := range []struct {
		name                        string
		rowLive, baseLive, rowBytes float64
	}{
		{"the same heap", 4 * mib, 4 * mib, 1300},
		{"both past the 4 MiB floor's reach", 2 * mib, 5 * mib, 1300},
		{"both almost empty", 0.1 * mib, 0.3 * mib, 1300},
		{"a row that allocates nothing", 0.1 * mib, 4 * mib, 0},
	} {
		if got := heapMismatches(results(c.rowLive, c.baseLive, c.rowBytes)); len(got) != 0 {
			t.Errorf("%s: heapMismatches = %q, want none", c.name, got)
		}
	}
	// Rows without live-B (another package's baseline, the Python script)
	// are not judged.
	res := results(0, 4*mib, 1300)
	res[r.pkg+" "+r.name].live = nil
	if got := heapMismatches(res); len(got) != 0 {
		t.Errorf("without live-B: heapMismatches = %q, want none", got)
	}
}

func TestParseReadsLiveHeap(t *testing.T) {
	results := map[string]*result{}
	parse("otelsession", []byte("BenchmarkBind/sessionwire/Bind-2   \t 1000\t 310.0 ns/op\t 420.0 cpu-ns/op\t 163536 live-B\t 96 B/op\t 3 allocs/op\n"), results)
	r := results["otelsession BenchmarkBind/sessionwire/Bind"]
	if r == nil || !slices.Equal(r.live, []float64{163536}) || !slices.Equal(r.cpu, []float64{420}) {
		t.Fatalf("parse: %+v", r)
	}
}

// Each target holds the rows it names in the tables perftables writes, and
// the targets table lists every row over its target with its comparison:
// a renamed row, or a target that picks nothing, fails here rather than
// in a ten-minute run.
func TestTargetsHoldTheirRowsAndNameThoseOver(t *testing.T) {
	results := map[string]*result{}
	for _, tb := range tables {
		for _, r := range tb.rows {
			results[r.pkg+" "+r.name] = &result{cpu: []float64{1000, 1000, 1000}}
			basePkg := r.basePkg
			if basePkg == "" {
				basePkg = r.pkg
			}
			if r.base != "" {
				results[basePkg+" "+r.base] = &result{cpu: []float64{1000, 1000, 1000}}
			}
		}
	}
	// Everything equal to its baseline: every row is within its target (a
	// comparison at the limit is within it).
	got, err := renderTargets(results, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRows := []int{3, 1, 6, 0, 1}
	lines := strings.Split(strings.TrimSpace(got), "\n")[2:]
	if len(lines) != len(targets) {
		t.Fatalf("%d lines for %d targets:\n%s", len(lines), len(targets), got)
	}
	for i, l := range lines {
		f := strings.Split(l, " | ")
		if wantRows[i] > 0 && f[1] != strconv.Itoa(wantRows[i]) {
			t.Errorf("target %d holds %s rows, want %d: %s", i, f[1], wantRows[i], l)
		}
		if f[1] != f[2] {
			t.Errorf("target %d: rows equal to their baselines are not all within it: %s", i, l)
		}
	}
	// The boundary target holds the 37 rows of the boundary table that
	// sit beside a raw path carrying the same, the two brokers beside
	// plain baggage and four whole gRPC calls; not what signing or the
	// legacy variables add, nor the four configurations given W3C twice
	// (a row added to a table changes this count: decide whether the
	// target holds it).
	if !strings.Contains(lines[3], "| 43 | 43 |") {
		t.Errorf("the boundary target does not hold the 43 rows it should:\n%s", lines[3])
	}
	// A first-time Bind at 1.5× its floor, and a foreign read at 1.2×, are
	// named with their comparison.
	results["otelsession BenchmarkBind/sessionwire/Bind_first_time"] = &result{cpu: []float64{1500, 1500, 1500}}
	results["otelsession BenchmarkLookup/foreign/sessionwire/Getenv"] = &result{cpu: []float64{1200, 1100, 1300}}
	got, err = renderTargets(results, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 1 | 0 | `Bind`, a session never bound before: 1.50× |", "| 6 | 5 | `Getenv`, bound field, the same context (baggage no sessionwire code built): 1.20× |"} {
		if !strings.Contains(got, want) {
			t.Errorf("the targets table lacks %q:\n%s", want, got)
		}
	}
}

// -from reads back what -raw wrote: each package's lines after perftables'
// own "pkg: DIR" line, not after the test binary's "pkg: MODULE/DIR", and
// the rounds in the order they ran, so that they pair as in the run.
func TestParseRawReadsWhatRawWrote(t *testing.T) {
	raw := "pkg: otelsession\ngoos: linux\npkg: github.com/sessionwire/sessionwire/otelsession\n" +
		"BenchmarkBind/x-2   \t 1000\t 300 ns/op\t 310 cpu-ns/op\n" +
		"pkg: python\nBenchmarkPy/bind \t 10\t 3000 ns/op\n" +
		"pkg: otelsession\npkg: github.com/sessionwire/sessionwire/otelsession\n" +
		"BenchmarkBind/x-2   \t 1000\t 320 ns/op\t 330 cpu-ns/op\n"
	got := parseRaw([]byte(raw))
	if r := got["otelsession BenchmarkBind/x"]; r == nil || !slices.Equal(r.cpu, []float64{310, 330}) {
		t.Errorf("otelsession's rounds: %+v", r)
	}
	if r := got["python BenchmarkPy/bind"]; r == nil || !slices.Equal(r.ns, []float64{3000}) {
		t.Errorf("python's round: %+v", r)
	}
	if len(got) != 2 {
		t.Errorf("%d results, want 2: %v", len(got), got)
	}
}
