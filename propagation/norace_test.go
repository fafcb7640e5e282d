//go:build !race

package propagation_test

// poolSlack is 0 without the race detector: a pooled HMAC state is reused.
// See race_test.go.
const poolSlack = 0
