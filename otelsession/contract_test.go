package otelsession_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/otelsession"
)

const (
	threadVar = "HERMES_SESSION_THREAD_ID"
	chatVar   = "HERMES_SESSION_CHAT_ID"
)

func fullSession() otelsession.Session {
	return otelsession.Session{
		Platform: "telegram", Source: "gateway", ChatID: "-1001234567890", ChatType: "group",
		ChatName: "Ops — night shift", ThreadID: "17585", UserID: "5512345678", UserIDAlt: "@alice",
		UserName: "Alice Example", ScopeID: "guild-998877", SessionKey: "agent:main:telegram:group:-1001234567890:17585",
		SessionID: "20261202_152133_a1b2c3", UISessionID: "tab-7", MessageID: "88121",
		Profile: "default", BrowserControlPrincipal: "user:alice", BrowserControlTransportFamily: "cdp",
		ParentChatID: "-1001234567000", Cron: otelsession.CronOff, Cwd: "/srv/work/alice",
	}
}

func TestSchema(t *testing.T) {
	t.Parallel()
	fields := otelsession.Fields()
	require.Len(t, fields, 25)
	wantKeys := map[string]string{
		"HERMES_SESSION_PLATFORM":                 "session.platform",
		"HERMES_SESSION_KEY":                      "session.key",
		"HERMES_SESSION_ID":                       "session.id",
		"HERMES_UI_SESSION_ID":                    "session.ui_session_id",
		"HERMES_CRON_SESSION":                     "session.cron_session",
		"HERMES_SESSION_PARENT_CHAT_ID":           "session.parent_chat_id",
		"HERMES_CRON_AUTO_DELIVER_PLATFORM":       "session.cron_auto_deliver_platform",
		"HERMES_CRON_JOB_ID":                      "session.cron_job_id",
		"HERMES_CRON_JOB_ORIGIN_USER_ID":          "session.cron_job_origin_user_id",
		"HERMES_CRON_JOB_ORIGIN_PLATFORM":         "session.cron_job_origin_platform",
		"HERMES_BROWSER_CONTROL_TRANSPORT_FAMILY": "session.browser_control_transport_family",
	}
	local := map[string]bool{
		"HERMES_UI_SESSION_ID": true, "HERMES_BROWSER_CONTROL_PRINCIPAL": true,
		"HERMES_BROWSER_CONTROL_TRANSPORT_FAMILY": true,
	}
	inSession := 0
	for _, f := range fields {
		t.Run(f.Name(), func(t *testing.T) {
			if want, ok := wantKeys[f.Name()]; ok {
				assert.Equal(t, want, f.Key())
			}
			assert.True(t, strings.HasPrefix(f.Key(), "session."))
			assert.Equal(t, f.Key(), strings.ToLower(f.Key()))
			byName, ok := otelsession.FieldByName(f.Name())
			assert.True(t, ok)
			assert.Equal(t, f, byName)
			byKey, ok := otelsession.FieldByKey(f.Key())
			assert.True(t, ok)
			assert.Equal(t, f, byKey)
			want := otelsession.Remote
			if local[f.Name()] {
				want = otelsession.Local
			}
			assert.Equal(t, want, f.Scope())
		})
		if f.InSession() {
			inSession++
		}
	}
	assert.Equal(t, 19, inSession, "Bind binds the 19 session fields")
	_, ok := otelsession.FieldByName("HERMES_SESSION_ASYNC_DELIVERY")
	assert.False(t, ok, "async delivery is a capability, not a field")
	_, ok = otelsession.FieldByName("PATH")
	assert.False(t, ok)
	var invalid otelsession.Field
	assert.False(t, invalid.Valid())
	assert.Empty(t, invalid.Key())
	assert.Empty(t, otelsession.Field(200).Name())
}

// The seed's core scenario: env fallback, then the bound value wins, then ""
// after Clear even though the environment still holds a value.
func TestGetenvFallbackThenBoundThenCleared(t *testing.T) {
	t.Parallel()
	ctx, _ := envCtx(map[string]string{threadVar: "env-thread", "PATH": "/usr/bin"})

	assert.Equal(t, "env-thread", otelsession.Getenv(ctx, threadVar, "def"), "Unset falls back to the environment")
	assert.Equal(t, "def", otelsession.Getenv(ctx, chatVar, "def"), "nothing bound, nothing in the environment: the default")
	assert.Equal(t, "/usr/bin", otelsession.Getenv(ctx, "PATH", ""), "names that are not session fields read the environment")

	bound := otelsession.Bind(ctx, otelsession.Session{ThreadID: "bound-thread"})
	assert.Equal(t, "bound-thread", otelsession.Getenv(bound, threadVar, "def"))
	assert.Equal(t, "", otelsession.Getenv(bound, chatVar, "def"), "a field bound empty is Cleared: no default, no fallback")

	cleared := otelsession.Clear(bound)
	assert.Equal(t, "", otelsession.Getenv(cleared, threadVar, "def"), "Cleared masks the stale environment value")
	_, st := otelsession.Lookup(cleared, otelsession.FieldThreadID)
	assert.Equal(t, otelsession.Cleared, st)

	assert.Equal(t, "env-thread", otelsession.Getenv(ctx, threadVar, ""), "the parent context is never changed")
}

func TestGetenvEmptyEnvironmentValue(t *testing.T) {
	t.Parallel()
	ctx, _ := envCtx(map[string]string{threadVar: ""})
	assert.Equal(t, "", otelsession.Getenv(ctx, threadVar, "def"), "like otelsession.getenv, a variable that exists but is empty is returned")
}

// The process environment is the default fallback; this test mutates it.
func TestGetenvReadsProcessEnvironmentByDefault(t *testing.T) {
	t.Setenv(threadVar, "from-os")
	ctx := context.Background()
	assert.Equal(t, "from-os", otelsession.Getenv(ctx, threadVar, ""))
	assert.Equal(t, "", otelsession.Getenv(otelsession.Clear(ctx), threadVar, "x"))
}

func TestBindSetsEveryField(t *testing.T) {
	t.Parallel()
	s := fullSession()
	ctx := otelsession.Bind(context.Background(), s)
	assert.Equal(t, s, otelsession.FromContext(ctx), "FromContext returns what Bind bound")
	for _, f := range otelsession.Fields() {
		_, st := otelsession.Lookup(ctx, f)
		switch {
		case f == otelsession.FieldCronSession:
			assert.Equal(t, otelsession.Cleared, st, "CronOff is Cleared")
		case !f.InSession():
			assert.Equal(t, otelsession.Unset, st, "%s: Bind leaves cron auto-deliver fields alone", f)
		default:
			assert.Equal(t, otelsession.Set, st, f.Key())
		}
	}
	assert.Equal(t, "/srv/work/alice", otelsession.Cwd(ctx))
	assert.True(t, otelsession.AsyncDeliverySupported(ctx))
}

func TestBindZeroSession(t *testing.T) {
	t.Parallel()
	ctx, _ := envCtx(map[string]string{"HERMES_CRON_SESSION": "1", chatVar: "stale"})
	ctx = otelsession.Bind(ctx, otelsession.Session{})
	for _, f := range otelsession.Fields() {
		_, st := otelsession.Lookup(ctx, f)
		want := otelsession.Cleared
		if f == otelsession.FieldCronSession || !f.InSession() {
			want = otelsession.Unset
		}
		assert.Equal(t, want, st, f.Key())
	}
	assert.Equal(t, "1", otelsession.Getenv(ctx, "HERMES_CRON_SESSION", ""), "a zero cron marker stays Unset and falls back")
	assert.Equal(t, "", otelsession.Getenv(ctx, chatVar, "def"))
	assert.True(t, otelsession.AsyncDeliverySupported(ctx), "the zero Session supports async delivery")
	assert.Equal(t, "", otelsession.Cwd(ctx))
}

func TestCronMarker(t *testing.T) {
	t.Parallel()
	ctx, _ := envCtx(map[string]string{"HERMES_CRON_SESSION": "1"})
	for _, tt := range []struct {
		marker otelsession.CronMarker
		want   string
		state  otelsession.State
	}{
		{otelsession.CronUnset, "1", otelsession.Unset},
		{otelsession.CronOff, "", otelsession.Cleared},
		{otelsession.CronOn, "1", otelsession.Set},
	} {
		t.Run(fmt.Sprint(tt.marker), func(t *testing.T) {
			c := otelsession.Bind(ctx, otelsession.Session{Cron: tt.marker})
			_, st := otelsession.Lookup(c, otelsession.FieldCronSession)
			assert.Equal(t, tt.state, st)
			assert.Equal(t, tt.want, otelsession.Getenv(c, "HERMES_CRON_SESSION", ""))
			assert.Equal(t, tt.marker, otelsession.FromContext(c).Cron)
		})
	}
}

func TestClear(t *testing.T) {
	t.Parallel()
	ctx := otelsession.With(context.Background(), otelsession.FieldCronAutoDeliverChatID, "cron-chat")
	ctx = otelsession.Bind(ctx, otelsession.Session{ChatID: "c", Stateless: true, Cwd: "/tmp/x", Cron: otelsession.CronOn, UISessionID: "tab"})
	require.False(t, otelsession.AsyncDeliverySupported(ctx))

	cleared := otelsession.Clear(ctx)
	for _, f := range otelsession.Fields() {
		_, st := otelsession.Lookup(cleared, f)
		if f.InSession() {
			assert.Equal(t, otelsession.Cleared, st, "%s is Cleared (the cron marker too)", f)
		}
	}
	v, st := otelsession.Lookup(cleared, otelsession.FieldCronAutoDeliverChatID)
	assert.Equal(t, otelsession.Set, st, "Clear leaves the cron auto-deliver fields alone")
	assert.Equal(t, "cron-chat", v)
	assert.True(t, otelsession.AsyncDeliverySupported(cleared), "a cleared context is back to supported, not stateless")
	assert.Equal(t, "", otelsession.Cwd(cleared))
}

func TestResetLeavesFieldsUnset(t *testing.T) {
	t.Parallel()
	ctx, _ := envCtx(map[string]string{threadVar: "env-thread"})
	ctx = otelsession.With(ctx, otelsession.FieldCronAutoDeliverPlatform, "slack")
	bound := otelsession.Bind(ctx, fullSession())
	for _, from := range []context.Context{bound, otelsession.Clear(bound)} {
		reset := otelsession.Reset(from)
		for _, f := range otelsession.Fields() {
			_, st := otelsession.Lookup(reset, f)
			assert.Equal(t, otelsession.Unset, st, "%s is Unset after Reset, not Cleared", f)
		}
		assert.Equal(t, "env-thread", otelsession.Getenv(reset, threadVar, ""), "Unset falls back again")
		assert.Equal(t, "", otelsession.Cwd(reset))
		assert.True(t, otelsession.AsyncDeliverySupported(reset))
	}
	assert.Equal(t, "17585", otelsession.Getenv(bound, threadVar, ""), "the parent context is never changed")
}

func TestResetDropsInheritedStateless(t *testing.T) {
	t.Parallel()
	sibling := otelsession.Bind(context.Background(), otelsession.Session{Platform: "api_server", Stateless: true})
	require.False(t, otelsession.AsyncDeliverySupported(sibling))
	assert.True(t, otelsession.AsyncDeliverySupported(otelsession.Reset(sibling)),
		"a task spawned from a stateless sibling must not misreport its own channel")
	declared := otelsession.DeclareStatelessChannel(context.Background())
	assert.True(t, otelsession.AsyncDeliverySupported(otelsession.Reset(declared)))
}

// A goroutine started from message A's context sees A until it resets, then
// nothing, then its own session B; A's context never changes.
func TestGoroutineInheritsUntilReset(t *testing.T) {
	t.Parallel()
	ctxA := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "A", ThreadID: "A-thread"})
	type seen struct{ before, afterReset, afterBind string }
	ch := make(chan seen)
	go func(ctx context.Context) {
		var s seen
		s.before = otelsession.Getenv(ctx, threadVar, "none")
		ctx = fallback.WithEnv(otelsession.Reset(ctx), fallback.NewMap(nil))
		s.afterReset = otelsession.Getenv(ctx, threadVar, "none")
		ctx = otelsession.Bind(ctx, otelsession.Session{ChatID: "B", ThreadID: "B-thread"})
		s.afterBind = otelsession.Getenv(ctx, threadVar, "none")
		ch <- s
	}(ctxA)
	got := <-ch
	assert.Equal(t, seen{"A-thread", "none", "B-thread"}, got)
	assert.Equal(t, "A-thread", otelsession.Getenv(ctxA, threadVar, ""))
}

func TestWithSingleField(t *testing.T) {
	t.Parallel()
	ctx, _ := envCtx(map[string]string{"HERMES_CRON_AUTO_DELIVER_THREAD_ID": "stale"})
	ctx = otelsession.Bind(ctx, otelsession.Session{ChatID: "c1"})
	job := otelsession.With(ctx, otelsession.FieldCronAutoDeliverPlatform, "discord")
	job = otelsession.With(job, otelsession.FieldCronAutoDeliverThreadID, "")
	job = otelsession.With(job, otelsession.FieldUISessionID, "tab-9")
	assert.Equal(t, "discord", otelsession.Getenv(job, "HERMES_CRON_AUTO_DELIVER_PLATFORM", ""))
	assert.Equal(t, "", otelsession.Getenv(job, "HERMES_CRON_AUTO_DELIVER_THREAD_ID", "def"), "With \"\" is Cleared")
	assert.Equal(t, "c1", otelsession.Getenv(job, chatVar, ""), "other fields are unchanged")
	assert.Equal(t, "tab-9", otelsession.FromContext(job).UISessionID)
	assert.Equal(t, "stale", otelsession.Getenv(ctx, "HERMES_CRON_AUTO_DELIVER_THREAD_ID", ""), "the parent is unchanged")
}

// Two cron jobs binding their own targets concurrently never see each other's.
func TestConcurrentCronJobs(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for i := range 100 {
		wg.Go(func() {
			ctx := otelsession.With(otelsession.Reset(context.Background()), otelsession.FieldCronAutoDeliverChatID, fmt.Sprint("chat-", i))
			if got := otelsession.Getenv(ctx, "HERMES_CRON_AUTO_DELIVER_CHAT_ID", ""); got != fmt.Sprint("chat-", i) {
				errs <- got
			}
		})
	}
	wg.Wait()
	close(errs)
	for got := range errs {
		t.Errorf("a cron job saw another job's target %q", got)
	}
}

func TestLocalFieldsNeverEnterBaggage(t *testing.T) {
	t.Parallel()
	ctx := otelsession.Bind(context.Background(), fullSession())
	b := baggage.FromContext(ctx)
	for _, f := range otelsession.Fields() {
		if f.Scope() == otelsession.Local {
			assert.Empty(t, b.Member(f.Key()).Key(), "%s must not be a baggage member", f)
		}
	}
	assert.Empty(t, b.Member(otelsession.CwdKey).Key())
	assert.NotContains(t, b.String(), "user:alice")
	assert.NotContains(t, b.String(), "srv")
}

func TestForgedLocalMemberIsIgnoredAndStripped(t *testing.T) {
	t.Parallel()
	m, err := baggage.NewMemberRaw("session.browser_control_principal", "attacker")
	require.NoError(t, err)
	b, err := baggage.New(m)
	require.NoError(t, err)
	ctx := baggage.ContextWithBaggage(context.Background(), b)

	v, st := otelsession.Lookup(ctx, otelsession.FieldBrowserControlPrincipal)
	assert.Equal(t, otelsession.Unset, st, "local fields are never read from baggage")
	assert.Empty(t, v)
	for _, c := range []context.Context{otelsession.Bind(ctx, otelsession.Session{}), otelsession.Clear(ctx), otelsession.Reset(ctx)} {
		assert.Empty(t, baggage.FromContext(c).Member("session.browser_control_principal").Key(),
			"a local key in baggage is owned by the session and removed when it is rewritten")
	}
}

func TestDelegatedChildren(t *testing.T) {
	ctx, env := envCtx(map[string]string{fallback.SessionIDVar: "old"})
	root := otelsession.WithSessionID(ctx, "parent-1")
	assert.Equal(t, "parent-1", env.Getenv(fallback.SessionIDVar), "a root context mirrors its id")
	assert.False(t, otelsession.IsDelegatedChild(root))

	var wg sync.WaitGroup
	seen := make([]string, 8)
	for i := range 8 {
		wg.Go(func() {
			child := otelsession.WithDelegatedChild(root, fmt.Sprint("child-", i))
			// The subagent's constructor calls WithSessionID, as in the seed.
			child = otelsession.WithSessionID(child, fmt.Sprint("child-", i))
			seen[i] = otelsession.Getenv(child, fallback.SessionIDVar, "")
			if !otelsession.IsDelegatedChild(child) {
				t.Errorf("child %d lost its delegated mark", i)
			}
		})
	}
	wg.Wait()
	for i, id := range seen {
		assert.Equal(t, fmt.Sprint("child-", i), id)
	}
	assert.Equal(t, "parent-1", env.Getenv(fallback.SessionIDVar), "children never write the process environment")
	assert.Equal(t, "parent-1", otelsession.Getenv(root, fallback.SessionIDVar, ""))

	nested := otelsession.WithDelegatedChild(otelsession.WithDelegatedChild(root, "child-a"), "grandchild")
	nested = otelsession.WithSessionID(nested, "grandchild-2")
	assert.Equal(t, "grandchild-2", otelsession.Getenv(nested, fallback.SessionIDVar, ""))
	assert.True(t, otelsession.IsDelegatedChild(otelsession.Reset(nested)), "the delegated mark survives Reset")
	assert.Equal(t, "parent-1", env.Getenv(fallback.SessionIDVar))

	cleared := otelsession.WithSessionID(root, "")
	_, st := otelsession.Lookup(cleared, otelsession.FieldSessionID)
	assert.Equal(t, otelsession.Cleared, st)
	assert.Equal(t, "", env.Getenv(fallback.SessionIDVar), "a root context mirrors \"\" too")
}

func TestMessagingSurface(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		envPlatform string // HERMES_PLATFORM
		platform    string
		source      string
		want        bool
	}{
		{"nothing bound", "", "", "", false},
		{"telegram", "", "telegram", "", true},
		{"discord source", "", "", "discord", true},
		{"cli", "", "", "cli", false},
		{"api server", "", "api_server", "", false},
		{"webhook", "", "webhook", "", false},
		{"msgraph webhook", "", "msgraph_webhook", "", false},
		{"desktop source", "", "", "desktop", false},
		{"tui", "", "", "tui", false},
		{"kanban", "", "kanban", "", false},
		{"unknown platform is messaging", "", "brand-new-chat", "", true},
		{"trimmed and lower-cased", "", "  CLI  ", "", false},
		{"upper-case chat platform", "", " Telegram ", "", true},
		{"whitespace only", "", "   ", "", false},
		{"local platform, chat source", "", "local", "slack", true},
		{"HERMES_PLATFORM wins over the session platform", "cli", "telegram", "", false},
		{"HERMES_PLATFORM chat", "matrix", "cli", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, _ := envCtx(map[string]string{"HERMES_PLATFORM": tt.envPlatform})
			ctx = otelsession.Bind(ctx, otelsession.Session{Platform: tt.platform, Source: tt.source})
			assert.Equal(t, tt.want, otelsession.IsMessagingSurface(ctx))
		})
	}
}

func TestMessagingSurfaceFallsBackToEnvironment(t *testing.T) {
	t.Parallel()
	ctx, _ := envCtx(map[string]string{"HERMES_SESSION_PLATFORM": "telegram"})
	assert.True(t, otelsession.IsMessagingSurface(ctx), "an Unset platform falls back to the environment")
	assert.False(t, otelsession.IsMessagingSurface(otelsession.Clear(ctx)), "a Cleared platform does not")
}

func TestAsyncDelivery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		kanban string
		build  func(context.Context) context.Context
		want   bool
	}{
		{"never bound", "", func(c context.Context) context.Context { return c }, true},
		{"gateway platform", "", func(c context.Context) context.Context {
			return otelsession.Bind(c, otelsession.Session{Platform: "telegram"})
		}, true},
		{"stateless adapter", "", func(c context.Context) context.Context {
			return otelsession.Bind(c, otelsession.Session{Stateless: true})
		}, false},
		{"declared stateless", "", otelsession.DeclareStatelessChannel, false},
		{"rebound as stateful", "", func(c context.Context) context.Context {
			return otelsession.Bind(otelsession.DeclareStatelessChannel(c), otelsession.Session{Platform: "slack"})
		}, true},
		{"kanban worker", "task-42", func(c context.Context) context.Context {
			return otelsession.Bind(c, otelsession.Session{Platform: "telegram"})
		}, false},
		{"kanban never bound", "task-42", func(c context.Context) context.Context { return c }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, _ := envCtx(map[string]string{"HERMES_KANBAN_TASK": tt.kanban})
			assert.Equal(t, tt.want, otelsession.AsyncDeliverySupported(tt.build(ctx)))
		})
	}
}

func TestRangeAgreesWithLookup(t *testing.T) {
	t.Parallel()
	ctx := otelsession.With(otelsession.Bind(context.Background(), fullSession()), otelsession.FieldThreadID, "")
	var n int
	otelsession.Range(ctx, func(f otelsession.Field, v string, st otelsession.State) bool {
		wv, wst := otelsession.Lookup(ctx, f)
		assert.Equal(t, wv, v, f.Key())
		assert.Equal(t, wst, st, f.Key())
		n++
		return true
	})
	assert.Equal(t, len(otelsession.Fields()), n)
	n = 0
	otelsession.Range(ctx, func(otelsession.Field, string, otelsession.State) bool { n++; return n < 3 })
	assert.Equal(t, 3, n, "Range stops when fn returns false")
}

// Getenv reads a bound field as Lookup does, for every field and every way a
// member can stand in the baggage (absent, empty, the Cleared marker as a
// peer sends it, a value) or a local field can be bound: only Unset falls
// back to the environment.
func TestGetenvAgreesWithLookup(t *testing.T) {
	t.Parallel()
	env := map[string]string{}
	for _, f := range otelsession.Fields() {
		env[f.Name()] = "from-env"
	}
	base, _ := envCtx(env)
	members := map[string]func(f otelsession.Field) (context.Context, error){
		"absent": func(otelsession.Field) (context.Context, error) { return base, nil },
		"empty member": func(f otelsession.Field) (context.Context, error) {
			return withRawMember(base, f.Key(), "")
		},
		"Cleared marker": func(f otelsession.Field) (context.Context, error) {
			return withRawMember(base, f.Key(), otelsession.ClearedValue)
		},
		"value member": func(f otelsession.Field) (context.Context, error) {
			return withRawMember(base, f.Key(), "v1")
		},
		"With a value": func(f otelsession.Field) (context.Context, error) { return otelsession.With(base, f, "v2"), nil },
		"With empty":   func(f otelsession.Field) (context.Context, error) { return otelsession.With(base, f, ""), nil },
		"Bind and Clear": func(otelsession.Field) (context.Context, error) {
			return otelsession.Clear(otelsession.Bind(base, fullSession())), nil
		},
	}
	for how, mk := range members {
		for _, f := range otelsession.Fields() {
			ctx, err := mk(f)
			require.NoError(t, err, "%s %s", how, f)
			v, st := otelsession.Lookup(ctx, f)
			want := v
			if st == otelsession.Unset {
				want = "from-env"
			}
			assert.Equal(t, want, otelsession.Getenv(ctx, f.Name(), "def"), "%s: %s (%s)", how, f.Name(), st)
			// The same name built at run time, at another address.
			assert.Equal(t, want, otelsession.Getenv(ctx, strings.Clone(f.Name()), "def"), "%s: %s built at run time (%s)", how, f.Name(), st)
		}
	}
}

// withRawMember puts key=value into ctx's baggage as a peer could send it,
// without otelsession's checks.
func withRawMember(ctx context.Context, key, value string) (context.Context, error) {
	m, err := baggage.NewMemberRaw(key, value)
	if err != nil {
		return nil, fmt.Errorf("member %s=%q: %w", key, value, err)
	}
	b, err := baggage.FromContext(ctx).SetMember(m)
	if err != nil {
		return nil, fmt.Errorf("set member %s: %w", key, err)
	}
	return baggage.ContextWithBaggage(ctx, b), nil
}
