// Package execsession carries a session into a child process and out of it
// again: the parent builds the child's environment from its context
// ([Environ], [Command]); the child restores the session with one call at
// start-up ([FromEnvironment]).
//
// # What the child's environment holds
//
//   - BAGGAGE, TRACEPARENT and TRACESTATE, the OpenTelemetry environment
//     carriers (https://opentelemetry.io/docs/specs/otel/context/env-carriers/),
//     injected with the configured propagator through
//     go.opentelemetry.io/contrib/propagators/envcar. The session's remote
//     fields travel here as ordinary baggage members, Cleared ones as %00.
//     Whatever the parent process itself inherited under these names is
//     replaced, or removed when the context has nothing to inject: a stale
//     trace or baggage never passes through.
//   - The legacy HERMES_* variable of every field, for tools that read
//     os.Getenv. Which ones, and with what value, is the leak policy of
//     package fallback (fallback.Decide): a field bound in the context
//     (Set or Cleared) is written, "" for Cleared, over whatever was
//     inherited; an Unset field is stripped in a process that binds sessions
//     (otelsession.Engaged), because its environment holds whichever
//     session wrote it last, and inherited as it is otherwise. Local fields
//     (UI session id, browser control) are written too: a child process is
//     inside the parent's trust domain, and the environment is the only way
//     they travel.
//   - SESSIONWIRE_CWD ([CwdVar]), the session's logical working directory,
//     under the same policy as the legacy variables. [Command] also starts the
//     child in that directory.
//   - HERMES_DELEGATED_CHILD_CONTEXT ([DelegatedChildVar]), the original's
//     delegated-child mark, which tools written for it read. It is stamped
//     "1" on the command of a delegated child (otelsession.WithDelegatedChild)
//     and kept, with its value, in every child of a process that is itself
//     marked, so a delegated child's whole lineage stays marked even through
//     programs that never restore a context. It is written only into the
//     environment built for one child: the parent's own environment never
//     holds it, so neither the parent nor a later sibling that is not
//     delegated becomes marked (fallback.DelegatedMark).
//   - No Kanban run identity (HERMES_KANBAN_TASK, _RUN_ID, _CLAIM_LOCK,
//     _GOAL_MODE, _GOAL_MAX_TURNS; fallback.IsKanbanRunIdentity): a Kanban
//     dispatcher grants it to the one worker process it starts, and nothing
//     that worker starts, delegated or not, is that worker. A child that
//     inherited it could complete its parent's card. This follows the
//     original's later rule (stripped from every tool subprocess) rather
//     than its earlier one (delegated children only): it protects the card
//     without relying on every caller marking its delegated children. The
//     board's location (HERMES_KANBAN_BOARD, _DB, _WORKSPACE,
//     _WORKSPACES_ROOT) passes through: it is where the work is, not who
//     owns it. A dispatcher starting a worker appends the identity to the
//     built environment (exec.Cmd uses the last entry of a name).
//
// A program that never configures a propagator (the OTel global is a no-op
// until otel.SetTextMapPropagator is called) sends no BAGGAGE; the session
// then reaches the child through the legacy variables only, which
// otelsession.Getenv still reads there.
//
// # In the child
//
// [FromEnvironment] starts from a Reset context and extracts the carriers
// through the inbound policy of package propagation, with a trust function
// that accepts the parent (it started this process) while still validating
// every value: malformed input gives an error and a wholly Unset session,
// never a panic. It then binds the local fields from their legacy variables,
// the working directory and the delegated-child mark. Remote fields come from
// BAGGAGE only; their legacy variables stay in the environment, where
// otelsession.Getenv finds them for any field BAGGAGE leaves Unset (a parent
// with no baggage propagator, or one written in another language).
//
// A child given a policy that does not trust its parent (Config.Inbound,
// say propagation.TrustNone with a verifier) takes the session from a
// BAGGAGE whose signature verifies, and nothing else the parent wrote:
// otelsession.Getenv reads none of the session's legacy variables there, a
// grandchild started from its context does not inherit them, and the local
// fields, the working directory and the delegated-child mark, which cannot
// be signed, are read (and passed on) only beside a verified session.
//
// This package owns the environment of child processes and nothing else: it
// never writes the current process's environment, and it decides no policy of
// its own — the leak policy is fallback's, the trust policy propagation's.
package execsession
