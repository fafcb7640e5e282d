package rabbitmqtest

import (
	"os/exec"
	"syscall"
)

// stopWithParent has the kernel send the broker's script SIGTERM when the
// test process dies without stopping it (a test timeout's panic, a kill), so
// that the script's own handler stops the broker instead of leaving it
// running.
func stopWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
