package fallback

// Variables a child process's environment carries that are not session
// fields: they describe where the child stands in a tree of agents, and the
// leak policy for them is decided here beside the fields'.

// DelegatedChildVar marks every process of a delegated child's lineage: the
// child's own commands and whatever they start in turn. The name is the
// original's (HERMES_DELEGATED_CHILD_CONTEXT), which tools written for it
// read: any non-empty value means "a delegated descendant, not the agent the
// dispatcher started". The original writes "1", and later versions the root
// of the Kanban board the lineage is fenced from; both are honoured.
const DelegatedChildVar = "HERMES_DELEGATED_CHILD_CONTEXT"

// DelegatedMark is the leak policy for [DelegatedChildVar]. inherited and
// present describe it in the environment the child would otherwise inherit;
// delegated reports whether the context the child is started from is a
// delegated child.
//
//   - An inherited non-empty mark is kept as it is: the process starting the
//     child is itself a delegated descendant (its own environment says so),
//     so the whole lineage stays marked, whatever its contexts say and even
//     when it never restored one. Keeping the value keeps an original's
//     board-root fence pointing where it pointed.
//   - Otherwise a delegated context stamps "1" on this one command.
//   - Otherwise the mark is absent.
//
// The mark is only ever written into the environment built for one child,
// never into the process's own: a delegated child's command must not turn
// its parent, or a later sibling that is not delegated, into a delegated
// descendant.
func DelegatedMark(inherited string, present, delegated bool) (value string, keep bool) {
	switch {
	case present && inherited != "":
		return inherited, true
	case delegated:
		return "1", true
	default:
		return "", false
	}
}

// kanbanRunIdentity are the variables a Kanban dispatcher gives the one
// worker process it starts for a task run: which card it owns, which run,
// the claim it holds, and the run's goal settings.
var kanbanRunIdentity = [...]string{
	"HERMES_KANBAN_TASK",
	"HERMES_KANBAN_RUN_ID",
	"HERMES_KANBAN_CLAIM_LOCK",
	"HERMES_KANBAN_GOAL_MODE",
	"HERMES_KANBAN_GOAL_MAX_TURNS",
}

// KanbanRunIdentityVars returns the Kanban run-identity variables that no
// child process inherits (see [IsKanbanRunIdentity]). The caller may modify
// the returned slice.
func KanbanRunIdentityVars() []string {
	return append([]string(nil), kanbanRunIdentity[:]...)
}

// IsKanbanRunIdentity reports whether name is one of the Kanban run-identity
// variables, which are stripped from the environment of every child process,
// delegated or not.
//
// The dispatcher grants them to exactly one process, the worker it starts.
// Anything that process starts is not that worker: a delegated child, a
// tool, a nested agent. A child that inherited them could complete, block or
// hand off its parent's card (this happened in the original, where a tool's
// nested agent closed the card its worker was still working on). The
// original first stripped them for delegated children only and later from
// every tool subprocess; this package follows the later rule, which needs no
// one to remember to mark a child as delegated.
//
// The location variables are kept: HERMES_KANBAN_BOARD, HERMES_KANBAN_DB,
// HERMES_KANBAN_WORKSPACE and HERMES_KANBAN_WORKSPACES_ROOT say where the
// board and the work are, not who owns them, and a child's own kanban
// commands must stay on the same board and in the same directory. A
// dispatcher grants a worker its identity by adding these variables after the
// environment is built (exec.Cmd uses the last entry of a name).
func IsKanbanRunIdentity(name string) bool {
	for _, n := range kanbanRunIdentity {
		if n == name {
			return true
		}
	}
	return false
}
