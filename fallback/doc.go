// Package fallback is the legacy process-environment layer under sessionwire.
//
// Before sessions lived in context.Context, a gateway kept them in process-wide
// environment variables (HERMES_SESSION_*). Some code still reads them there:
// command-line entry points that never bind a session, cron schedulers, tools
// started as child processes. This package owns that boundary and nothing else:
//
//   - [Env], the small lookup interface a never-set (Unset) session field falls
//     back to, with the real process environment ([OS]) as the default and
//     [Map] for tests and embedders; a context can carry its own ([WithEnv]);
//   - the root session-id mirror ([MirrorSessionID]) that keeps
//     HERMES_SESSION_ID in step for single-process entry points;
//   - the child-environment leak policy ([ChildEnviron], [Decide]): which
//     session variables a child process inherits, as a pure function;
//   - the lineage variables beside them: the delegated-child mark
//     ([DelegatedChildVar], [DelegatedMark]), kept for a delegated child's
//     whole lineage, and the Kanban run identity ([IsKanbanRunIdentity]),
//     which no child process inherits.
//
// It knows variable names and values only. It does not import OpenTelemetry or
// know about baggage; package otelsession translates its field states into the
// [Var] values this package decides on.
package fallback
