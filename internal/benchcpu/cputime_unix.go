//go:build unix

package benchcpu

import "syscall"

// processTime is the process's user and system CPU time in nanoseconds, -1
// when the system does not say.
func processTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
