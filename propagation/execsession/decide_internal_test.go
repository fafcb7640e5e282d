package execsession

import (
	"testing"

	"github.com/sessionwire/sessionwire/fallback"
)

// Environ decides variables the parent did not inherit without calling the
// leak policy; its answer must be the policy's, latched or not.
func TestDecideUninheritedIsTheLeakPolicy(t *testing.T) {
	for _, bound := range []bool{false, true} {
		for _, value := range []string{"", "x", "\x00"} {
			for _, engaged := range []bool{false, true} {
				wantV, wantKeep := fallback.Decide(fallback.Var{Name: "HERMES_SESSION_CHAT_ID", Bound: bound, Value: value}, "", false, engaged)
				gotV, gotKeep := decideUninherited(bound, value)
				if gotV != wantV || gotKeep != wantKeep {
					t.Errorf("bound %v, value %q, engaged %v: decideUninherited gives (%q, %v), fallback.Decide (%q, %v)",
						bound, value, engaged, gotV, gotKeep, wantV, wantKeep)
				}
			}
		}
	}
}
