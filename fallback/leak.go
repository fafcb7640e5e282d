package fallback

import "strings"

// Var is one session variable as a parent context holds it, described for the
// leak policy.
type Var struct {
	// Name is the legacy environment name, such as HERMES_SESSION_CHAT_ID.
	Name string
	// Bound reports whether the parent context bound the field: Set or
	// Cleared. An unbound (Unset) field has Bound false.
	Bound bool
	// Value is the bound value; "" when the field is Cleared or unbound.
	Value string
}

// Decide is the leak policy for one session variable of a child process's
// environment. inherited and present describe the variable in the environment
// the child would otherwise inherit; engaged reports whether this process
// binds sessions in contexts (otelsession.Engaged).
//
//   - A bound variable overrides the inherited one: its value, or "" when it
//     is Cleared (so a stale inherited value stays masked in the child too).
//   - An unbound variable is stripped when engaged: in a process that binds
//     sessions per unit of work, the process environment holds whichever
//     session wrote it last, so passing it on would leak a foreign session.
//   - An unbound variable is inherited when not engaged: a single-session
//     program (a CLI, a cron job) has no other session to leak.
//
// keep is false when the variable must be absent from the child's environment.
func Decide(v Var, inherited string, present, engaged bool) (value string, keep bool) {
	switch {
	case v.Bound:
		return v.Value, true
	case engaged || !present:
		return "", false
	default:
		return inherited, true
	}
}

// ChildEnviron applies [Decide] to every variable in vars and returns the
// environment for a child process, in the "KEY=value" form of os.Environ and
// exec.Cmd.Env. Entries of inherited that are not named in vars are kept as
// they are and in their order, except the Kanban run identity
// ([IsKanbanRunIdentity]), which no child inherits; the session variables
// follow, in the order of vars. inherited is not modified.
//
// When inherited names a variable more than once, the last entry is the one
// considered, as in exec.Cmd.
func ChildEnviron(inherited []string, vars []Var, engaged bool) []string {
	managed := make(map[string]int, len(vars))
	for i, v := range vars {
		managed[v.Name] = i
	}
	out := make([]string, 0, len(inherited)+len(vars))
	seen := make([]string, len(vars))
	present := make([]bool, len(vars))
	for _, kv := range inherited {
		name, value, _ := strings.Cut(kv, "=")
		if i, ok := managed[name]; ok {
			seen[i], present[i] = value, true
			continue
		}
		if IsKanbanRunIdentity(name) {
			continue
		}
		out = append(out, kv)
	}
	for i, v := range vars {
		if value, keep := Decide(v, seen[i], present[i], engaged); keep {
			out = append(out, v.Name+"="+value)
		}
	}
	return out
}
