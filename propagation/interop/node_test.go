package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	jsDir  = "js"
	script = "propagate.cjs"
	// nodeTimeout bounds one run of the script; a run takes about 0.1 s.
	nodeTimeout = 20 * time.Second
)

// nodeRequest is the script's input; see js/propagate.cjs.
type nodeRequest struct {
	Mode        string            `json:"mode"`
	Headers     map[string]any    `json:"headers,omitempty"`
	Entries     map[string]string `json:"entries,omitempty"`
	Traceparent string            `json:"traceparent,omitempty"`
}

// nodeResponse is what the JavaScript SDK injected, and the baggage entries
// (decoded) it held before injecting.
type nodeResponse struct {
	Headers map[string]string `json:"headers"`
	Entries map[string]string `json:"entries"`
}

var (
	nodeOnce sync.Once
	nodePath string
	nodeErr  error // set when the pinned packages are not installed and could not be
	noNode   error // set when there is no usable Node.js
)

// node returns the path of the node binary. The first call installs the
// pinned JavaScript packages from the lockfile when they are missing or
// stale, so that `go test ./...` on a fresh clone needs nothing done by
// hand. Without Node.js (or with one older than 20.6) the tests are skipped,
// saying why, except in CI (CI=true), where they must run.
func node(t *testing.T) string {
	t.Helper()
	nodeOnce.Do(func() {
		nodePath, noNode = usableNode()
		if noNode == nil {
			nodeErr = ensureInstalled()
		}
	})
	if noNode != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI must run the interoperability tests: install Node.js >= 20.6 with npm", noNode)
		}
		t.Skipf("%v: these tests run the OpenTelemetry JavaScript SDK on Node.js >= 20.6 (install it, with npm, to run them)", noNode)
	}
	if nodeErr != nil {
		t.Fatal(nodeErr)
	}
	return nodePath
}

// usableNode finds node, and npm beside it, and checks the version the
// pinned @opentelemetry/core needs.
func usableNode() (string, error) {
	bin, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("node is not on PATH (%w)", err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "v%d.%d", &major, &minor); err != nil {
		return "", fmt.Errorf("%s --version printed %q: %w", bin, out, err)
	}
	if major < 20 || major == 20 && minor < 6 {
		return "", fmt.Errorf("node %s is too old (@opentelemetry/core 2.12.1 needs >= 20.6)", strings.TrimSpace(string(out)))
	}
	return bin, nil
}

// installTimeout bounds `npm ci`: it downloads two small packages.
const installTimeout = 5 * time.Minute

// ensureInstalled installs the packages js/package-lock.json pins with
// `npm ci`, unless node_modules already holds them. A lock file serialises
// concurrent test runs (two `go test` invocations, or a developer's and an
// editor's): the second waits and then finds the packages installed.
func ensureInstalled() error {
	if checkInstalled() == nil {
		return nil
	}
	lock, err := os.OpenFile(filepath.Join(jsDir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("install the JavaScript packages: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("install the JavaScript packages: lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing releases it too
	if checkInstalled() == nil {
		return nil // another run installed them while this one waited
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("the pinned JavaScript packages are not installed and npm is not on PATH (%w): install npm beside node", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = jsDir
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("install the pinned JavaScript packages with `npm ci` in propagation/interop/js: %w\n%s", err, out)
	}
	return checkInstalled()
}

// checkInstalled compares node_modules with the exact versions js/package.json
// pins, so a stale or missing install fails with the command that fixes it
// rather than with a confusing require() error from the script.
func checkInstalled() error {
	const fix = "install the pinned versions from the repository root with " +
		"(cd propagation/interop/js && npm ci --no-audit --no-fund)"
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := readJSON(filepath.Join(jsDir, "package.json"), &pkg); err != nil {
		return err
	}
	if len(pkg.Dependencies) == 0 {
		return errors.New("js/package.json pins no dependencies")
	}
	for name, want := range pkg.Dependencies {
		var got struct {
			Version string `json:"version"`
		}
		err := readJSON(filepath.Join(jsDir, "node_modules", name, "package.json"), &got)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("the JavaScript packages these tests run are not installed (%s is missing): %s", name, fix)
		case err != nil:
			return err
		case got.Version != want:
			return fmt.Errorf("%s %s is installed, js/package.json pins %s: %s", name, got.Version, want, fix)
		}
	}
	return nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// runNode runs js/propagate.cjs with req on stdin.
func runNode(t *testing.T, req nodeRequest) nodeResponse {
	t.Helper()
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	out := runScript(t, in)
	var resp nodeResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("decode the output of %s: %v\n%s", script, err, out)
	}
	return resp
}

// runScript runs js/propagate.cjs with stdin and args, bounded by
// nodeTimeout, and returns its standard output.
func runScript(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	bin := node(t)
	ctx, cancel := context.WithTimeout(t.Context(), nodeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{script}, args...)...)
	cmd.Dir = jsDir
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s %s: %v (timeout %v)\n%s", script, strings.Join(args, " "), err, nodeTimeout, stderr.Bytes())
	}
	return stdout.Bytes()
}
