//go:build !unix

package benchcpu

// processTime is not measured here: no cpu-ns/op is reported.
func processTime() int64 { return -1 }
