//go:build !unix

package sessiontest

import "testing"

// CPUTime reports nothing where getrusage is not available; see the unix
// version.
func CPUTime(*testing.B) func() { return func() {} }
