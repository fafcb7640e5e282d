package fallback

import "fmt"

// SessionIDVar is the process-environment variable that mirrors the root
// session id for code that reads the environment directly.
const SessionIDVar = "HERMES_SESSION_ID"

// MirrorSessionID writes id to [SessionIDVar] in env. Only a root context
// mirrors its id: a delegated child's id must never reach the process-wide
// environment, where it would replace the parent's for the rest of the
// process. Deciding which context is a root is the caller's job.
func MirrorSessionID(env Env, id string) error {
	if err := env.Setenv(SessionIDVar, id); err != nil {
		return fmt.Errorf("mirror %s into the process environment: %w", SessionIDVar, err)
	}
	return nil
}
