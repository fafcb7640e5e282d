//go:build !linux

package rabbitmqtest

import "os/exec"

// stopWithParent does nothing where the kernel cannot signal a child when
// its parent dies; a broker left by a killed test must be stopped by hand.
func stopWithParent(*exec.Cmd) {}
