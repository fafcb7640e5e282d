// Package benchcpu reports a benchmark's process CPU time per operation
// (cpu-ns/op) beside its wall time, and the live heap the loop ran beside
// (live-B). On a shared machine the wall time of a benchmark swings with
// whatever else runs; the CPU time the process spent (its own work and its
// garbage collection) swings far less, so the performance tables compare a
// row with its baseline on it. The collector's part of that time depends on
// the live heap, so the tables also check that a row and its baseline ran
// beside comparable ones. For the allocation budgets that tests assert
// without timing anything, it also counts the bytes an operation allocates
// per call (BytesPerRun, beside testing.AllocsPerRun). It owns nothing else.
package benchcpu
