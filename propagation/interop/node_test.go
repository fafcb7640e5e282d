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
	nodeErr  error // set when node_modules is not what js/package.json pins
	noNode   error // set when node is not on PATH
)

// node returns the path of the node binary, skipping the test when there is
// none and failing it when the pinned JavaScript packages are not installed.
func node(t *testing.T) string {
	t.Helper()
	nodeOnce.Do(func() {
		nodePath, noNode = exec.LookPath("node")
		if noNode == nil {
			nodeErr = checkInstalled()
		}
	})
	if noNode != nil {
		t.Skipf("node is not on PATH (%v): these tests run the OpenTelemetry JavaScript SDK on Node.js 20", noNode)
	}
	if nodeErr != nil {
		t.Fatal(nodeErr)
	}
	return nodePath
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
