package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// jaegerBinary returns the Jaeger v2 binary the end-to-end test runs:
// SESSIONWIRE_JAEGER when it is set (then it must be there), else the one
// collector-config/jaegertool/build.sh has cached for the pinned version.
// Without either the test is skipped, saying how to build it: the build
// takes several minutes, too long to start unasked inside `go test ./...`.
// .ci/run builds it after the README's test command and runs this test
// again with SESSIONWIRE_JAEGER set, so CI never skips it.
func jaegerBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("SESSIONWIRE_JAEGER"); bin != "" {
		if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			t.Fatalf("SESSIONWIRE_JAEGER=%s is not an executable file (%v): build it with collector-config/jaegertool/build.sh", bin, err)
		}
		return bin
	}
	bin, err := cachedJaeger()
	if err == nil {
		if _, err = os.Stat(bin); err == nil {
			return bin
		}
	}
	t.Skipf("Jaeger is not built on this machine (%v): run `export SESSIONWIRE_JAEGER=$(collector-config/jaegertool/build.sh)` "+
		"once (a build of several minutes, cached for later runs), then this test; .ci/run does both", err)
	return ""
}

// cachedJaeger is where build.sh keeps the binary of the Jaeger version its
// go.mod pins (the same rule as the script's).
func cachedJaeger() (string, error) {
	b, err := os.ReadFile(filepath.Join("..", "..", "collector-config", "jaegertool", "go.mod"))
	if err != nil {
		return "", fmt.Errorf("read the Jaeger tool module: %w", err)
	}
	version := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == "github.com/jaegertracing/jaeger" {
			version = f[1]
		}
	}
	if version == "" {
		return "", fmt.Errorf("collector-config/jaegertool/go.mod does not require github.com/jaegertracing/jaeger")
	}
	cache := os.Getenv("SESSIONWIRE_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("find the cache directory: %w", err)
			}
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "sessionwire")
	}
	return filepath.Join(cache, "jaeger-"+version, "jaeger"), nil
}
