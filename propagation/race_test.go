//go:build race

package propagation_test

// poolSlack is how many allocations per signed message an allocation budget
// allows for the pooled HMAC states under the race detector, where
// sync.Pool drops a quarter of what is put back on purpose, so that about
// one message in four builds a new state (about eight allocations).
const poolSlack = 4
