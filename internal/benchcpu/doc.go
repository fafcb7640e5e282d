// Package benchcpu reports a benchmark's process CPU time per operation
// (cpu-ns/op) beside its wall time. On a shared machine the wall time of a
// benchmark swings with whatever else runs; the CPU time the process spent
// (its own work and its garbage collection) swings far less, so the
// performance tables compare a row with its baseline on it. It owns nothing
// else.
package benchcpu
