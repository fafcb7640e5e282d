package fallback

import (
	"context"
	"os"
	"sync"
)

// Env is where a session field that was never bound in a context falls back
// to, and where the root session id is mirrored. Implementations must be safe
// for concurrent use.
type Env interface {
	// LookupEnv reports the value of the variable named key, like os.LookupEnv.
	LookupEnv(key string) (string, bool)
	// Setenv sets the variable named key, like os.Setenv.
	Setenv(key, value string) error
}

// OS is the real process environment. It is the default [Env].
type OS struct{}

// LookupEnv calls os.LookupEnv.
func (OS) LookupEnv(key string) (string, bool) { return os.LookupEnv(key) }

// Setenv calls os.Setenv.
func (OS) Setenv(key, value string) error { return os.Setenv(key, value) }

// Map is an in-memory [Env], safe for concurrent use. Its zero value is an
// empty environment. Tests use it instead of mutating the process environment
// (which forbids t.Parallel); embedders use it to give one host its own view.
type Map struct {
	mu   sync.RWMutex
	vars map[string]string
}

// NewMap returns a Map holding a copy of vars.
func NewMap(vars map[string]string) *Map {
	m := &Map{vars: make(map[string]string, len(vars))}
	for k, v := range vars {
		m.vars[k] = v
	}
	return m
}

// LookupEnv reports the value stored for key.
func (m *Map) LookupEnv(key string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.vars[key]
	return v, ok
}

// Setenv stores value under key.
func (m *Map) Setenv(key, value string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.vars == nil {
		m.vars = make(map[string]string)
	}
	m.vars[key] = value
	return nil
}

// Getenv returns the value stored for key, or "".
func (m *Map) Getenv(key string) string {
	v, _ := m.LookupEnv(key)
	return v
}

type envKey struct{}

// WithEnv returns a copy of ctx whose session fallback environment is env.
// Code running under the returned context reads Unset session fields, and
// mirrors a root session id, through env instead of the process environment.
// A nil env restores the default.
func WithEnv(ctx context.Context, env Env) context.Context {
	return context.WithValue(ctx, envKey{}, env)
}

// EnvFrom returns the fallback environment of ctx: the one installed by
// [WithEnv], or [OS] when there is none.
func EnvFrom(ctx context.Context) Env {
	if env, ok := ctx.Value(envKey{}).(Env); ok && env != nil {
		return env
	}
	return OS{}
}

// Getenv returns the value of key in ctx's fallback environment, or "".
func Getenv(ctx context.Context, key string) string {
	v, _ := EnvFrom(ctx).LookupEnv(key)
	return v
}
