package otelsession_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
)

func member(t *testing.T, key, value string) baggage.Member {
	t.Helper()
	m, err := baggage.NewMemberRaw(key, value)
	require.NoError(t, err)
	return m
}

// The baggage in the context is the truth: whatever stock OTel code put there
// reads back through Lookup.
func TestBaggageBuiltByStockCodeReadsBack(t *testing.T) {
	t.Parallel()
	b, err := baggage.New(
		member(t, "session.chat_id", "-100 42"),
		member(t, "session.thread_id", "\x00"),
		member(t, "session.scope_id", ""),
		member(t, "tenant", "acme"),
	)
	require.NoError(t, err)
	ctx, _ := envCtx(map[string]string{"HERMES_SESSION_USER_ID": "env-user"})
	ctx = baggage.ContextWithBaggage(ctx, b)

	tests := []struct {
		f     otelsession.Field
		value string
		state otelsession.State
	}{
		{otelsession.FieldChatID, "-100 42", otelsession.Set},
		{otelsession.FieldThreadID, "", otelsession.Cleared},
		{otelsession.FieldScopeID, "", otelsession.Cleared}, // an empty member written by other code
		{otelsession.FieldUserID, "", otelsession.Unset},
	}
	for _, tt := range tests {
		v, st := otelsession.Lookup(ctx, tt.f)
		assert.Equal(t, tt.state, st, tt.f.Key())
		assert.Equal(t, tt.value, v, tt.f.Key())
	}
	assert.Equal(t, "env-user", otelsession.Getenv(ctx, "HERMES_SESSION_USER_ID", ""))

	// A later write by stock code wins over an earlier Bind.
	bound := otelsession.Bind(ctx, otelsession.Session{ChatID: "mine"})
	over, err := baggage.FromContext(bound).SetMember(member(t, "session.chat_id", "theirs"))
	require.NoError(t, err)
	v, _ := otelsession.Lookup(baggage.ContextWithBaggage(bound, over), otelsession.FieldChatID)
	assert.Equal(t, "theirs", v)
}

func TestForeignMembersPassThrough(t *testing.T) {
	t.Parallel()
	props, err := baggage.NewKeyValueProperty("ttl", "30")
	require.NoError(t, err)
	withProp, err := baggage.NewMemberRaw("tenant", "acme corp", props)
	require.NoError(t, err)
	// The session namespace is owned: a key in it that the table does not
	// know, in any spelling another SDK would decode into it, is never passed
	// on as "not ours".
	b, err := baggage.New(withProp, member(t, "feature", "beta"), member(t, "session.custom", "app-owned"),
		member(t, "session%2Echat_id", "forged"), member(t, "SESSION.thread_id", "forged"))
	require.NoError(t, err)
	ctx := baggage.ContextWithBaggage(context.Background(), b)

	for name, c := range map[string]context.Context{
		"bind":  otelsession.Bind(ctx, fullSession()),
		"clear": otelsession.Clear(otelsession.Bind(ctx, fullSession())),
		"reset": otelsession.Reset(otelsession.Bind(ctx, fullSession())),
		"with":  otelsession.With(ctx, otelsession.FieldChatID, "x"),
	} {
		t.Run(name, func(t *testing.T) {
			got := baggage.FromContext(c)
			assert.Equal(t, withProp.String(), got.Member("tenant").String(), "value and properties untouched")
			assert.Equal(t, "beta", got.Member("feature").Value())
			for _, k := range []string{"session.custom", "session%2Echat_id", "SESSION.thread_id"} {
				assert.Empty(t, got.Member(k).Key(), "%s is in the session namespace", k)
			}
		})
	}
	assert.Equal(t, 2, baggage.FromContext(otelsession.Reset(otelsession.Bind(ctx, fullSession()))).Len(),
		"Reset removes exactly the session's members")
}

// Cleared survives a stock W3C round trip as "%00"; an empty member value
// would not survive some foreign SDKs (see propagation's interop tests).
func TestClearedSentinelOnTheWire(t *testing.T) {
	t.Parallel()
	ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "c", ThreadID: ""})
	carrier := propagation.MapCarrier{}
	propagation.Baggage{}.Inject(ctx, carrier)
	header := carrier.Get("baggage")
	assert.Contains(t, header, "session.thread_id=%00")
	assert.NotContains(t, header, "session.thread_id=,")

	out := propagation.Baggage{}.Extract(context.Background(), carrier)
	_, st := otelsession.Lookup(out, otelsession.FieldThreadID)
	assert.Equal(t, otelsession.Cleared, st)
	v, st := otelsession.Lookup(out, otelsession.FieldChatID)
	assert.Equal(t, otelsession.Set, st)
	assert.Equal(t, "c", v)

	// A literal "%00" typed by a user is a value, not the sentinel.
	lit := otelsession.Bind(context.Background(), otelsession.Session{ThreadID: "%00"})
	carrier = propagation.MapCarrier{}
	propagation.Baggage{}.Inject(lit, carrier)
	v, st = otelsession.Lookup(propagation.Baggage{}.Extract(context.Background(), carrier), otelsession.FieldThreadID)
	assert.Equal(t, otelsession.Set, st)
	assert.Equal(t, "%00", v)
}

// Hostile values: never a panic, never a partial session, and the caller
// learns why (Validate before, otel.Handle after).
func TestHostileValues(t *testing.T) {
	tests := []struct {
		name string
		s    otelsession.Session
		want error
	}{
		{"invalid UTF-8", otelsession.Session{ChatID: "ok", ThreadID: "\xff\xfe"}, otelsession.ErrInvalidValue},
		{"NUL byte", otelsession.Session{ChatID: "ok", ThreadID: "a\x00b"}, otelsession.ErrInvalidValue},
		{"the sentinel itself", otelsession.Session{ChatID: "ok", ThreadID: "\x00"}, otelsession.ErrInvalidValue},
		// What every receiving edge refuses, Bind refuses too: a value that
		// binds here must never make the next service drop the session.
		{"line feed", otelsession.Session{ChatID: "ok", ThreadID: "17585\n"}, otelsession.ErrInvalidValue},
		{"carriage return", otelsession.Session{ChatID: "ok", UserID: "u\r\nx"}, otelsession.ErrInvalidValue},
		{"other control character", otelsession.Session{ChatID: "ok", ScopeID: "g\x1b[31m"}, otelsession.ErrInvalidValue},
		{"DEL", otelsession.Session{ChatID: "ok", MessageID: "1\x7f"}, otelsession.ErrInvalidValue},
		{"U+FFFD", otelsession.Session{ChatID: "ok", SessionKey: "k\uFFFD"}, otelsession.ErrInvalidValue},
		{"platform name too long", otelsession.Session{ChatID: "ok", Platform: strings.Repeat("p", 65)}, otelsession.ErrValueTooLong},
		{"too long", otelsession.Session{ChatID: "ok", ThreadID: strings.Repeat("x", otelsession.MaxValueBytes+1)}, otelsession.ErrValueTooLong},
		{"local field too long", otelsession.Session{ChatID: "ok", UISessionID: strings.Repeat("x", 10_000)}, otelsession.ErrValueTooLong},
		{"cwd with NUL", otelsession.Session{ChatID: "ok", Cwd: "/a\x00b"}, otelsession.ErrInvalidValue},
		{"unknown cron marker", otelsession.Session{ChatID: "ok", Cron: 9}, otelsession.ErrInvalidValue},
		{"session over 8192 bytes encoded", hugeSession(), otelsession.ErrSessionTooLarge},
	}
	ctx, _ := envCtx(map[string]string{chatVar: "stale-env"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			require.ErrorIs(t, err, tt.want)
			assert.NotContains(t, err.Error(), "ok", "errors name fields, not values")
			reported.take()

			got := otelsession.Bind(ctx, tt.s)
			assert.True(t, reported.has(tt.want), "Bind reports the refusal")
			for _, f := range otelsession.Fields() {
				if !f.InSession() {
					continue
				}
				_, st := otelsession.Lookup(got, f)
				assert.Equal(t, otelsession.Cleared, st, "%s: a refused session is bound wholly Cleared", f)
			}
			assert.Equal(t, "", otelsession.Getenv(got, chatVar, "def"), "and masks the environment")
			assert.Equal(t, "", otelsession.Cwd(got))
		})
	}
	require.NoError(t, fullSession().Validate())
	require.NoError(t, otelsession.Session{}.Validate())
}

func hugeSession() otelsession.Session {
	v := strings.Repeat("é", otelsession.MaxValueBytes/2) // 512 bytes, 1536 encoded
	return otelsession.Session{ChatID: v, ThreadID: v, UserID: v, ScopeID: v, SessionKey: v, SessionID: v}
}

func TestWithHostileValue(t *testing.T) {
	ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "c", ThreadID: "t"})
	reported.take()
	got := otelsession.With(ctx, otelsession.FieldThreadID, "\xff")
	assert.True(t, reported.has(otelsession.ErrInvalidValue))
	_, st := otelsession.Lookup(got, otelsession.FieldThreadID)
	assert.Equal(t, otelsession.Cleared, st, "a refused value binds the field Cleared")
	v, _ := otelsession.Lookup(got, otelsession.FieldChatID)
	assert.Equal(t, "c", v)

	same := otelsession.With(ctx, otelsession.Field(0), "x")
	assert.True(t, reported.has(otelsession.ErrUnknownField))
	assert.Equal(t, ctx, same)

	got = otelsession.WithDelegatedChild(ctx, "id\x00")
	assert.True(t, reported.has(otelsession.ErrInvalidValue))
	_, st = otelsession.Lookup(got, otelsession.FieldSessionID)
	assert.Equal(t, otelsession.Cleared, st)
}

// The application's own baggage nearly fills the W3C budget: the session is
// never half-dropped; foreign members make room, and the drop is reported.
func TestBindWhenApplicationBaggageFillsTheBudget(t *testing.T) {
	tests := []struct {
		name        string
		members     func(t *testing.T) []baggage.Member
		wantDropped bool
	}{
		{"bytes nearly full", func(t *testing.T) []baggage.Member {
			var ms []baggage.Member
			for i := range 8 {
				ms = append(ms, member(t, fmt.Sprintf("app%d", i), strings.Repeat("v", 990)))
			}
			return ms
		}, true},
		{"members nearly full", func(t *testing.T) []baggage.Member {
			var ms []baggage.Member
			for i := range 60 {
				ms = append(ms, member(t, fmt.Sprintf("app%02d", i), "v"))
			}
			return ms
		}, true},
		{"room to spare", func(t *testing.T) []baggage.Member {
			return []baggage.Member{member(t, "app", strings.Repeat("v", 2000))}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := baggage.New(tt.members(t)...)
			require.NoError(t, err)
			ctx := baggage.ContextWithBaggage(context.Background(), b)
			reported.take()

			got := otelsession.Bind(ctx, fullSession())
			assert.Equal(t, tt.wantDropped, reported.has(otelsession.ErrForeignMembersDropped))
			gb := baggage.FromContext(got)
			for _, f := range otelsession.Fields() {
				if f.Scope() == otelsession.Remote && f.InSession() {
					assert.NotEmpty(t, gb.Member(f.Key()).Key(), "%s must be present", f)
				}
			}
			assert.Equal(t, fullSession(), otelsession.FromContext(got))
			assert.LessOrEqual(t, gb.Len(), otelsession.MaxBaggageMembers)
			assert.LessOrEqual(t, len(gb.String()), otelsession.MaxBaggageBytes)

			// What fits is what a stock receiver gets back whole.
			carrier := propagation.MapCarrier{}
			propagation.Baggage{}.Inject(got, carrier)
			back := propagation.Baggage{}.Extract(context.Background(), carrier)
			assert.Equal(t, fullSession().ChatID, otelsession.FromContext(back).ChatID)
			assert.Equal(t, gb.Len(), baggage.FromContext(back).Len())
		})
	}
}

// A signature covers the session it was made over: any write drops it.
func TestWritesDropTheSignature(t *testing.T) {
	t.Parallel()
	signed := func() context.Context {
		ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "c"})
		b, err := baggage.FromContext(ctx).SetMember(member(t, otelsession.SignatureKey, "v1.k1.1767225600.abc"))
		require.NoError(t, err)
		return baggage.ContextWithBaggage(ctx, b)
	}
	for name, write := range map[string]func(context.Context) context.Context{
		"bind":      func(c context.Context) context.Context { return otelsession.Bind(c, otelsession.Session{ChatID: "c"}) },
		"clear":     otelsession.Clear,
		"reset":     otelsession.Reset,
		"with":      func(c context.Context) context.Context { return otelsession.With(c, otelsession.FieldThreadID, "t") },
		"stateless": otelsession.DeclareStatelessChannel,
		"id":        func(c context.Context) context.Context { return otelsession.WithDelegatedChild(c, "child") },
	} {
		t.Run(name, func(t *testing.T) {
			assert.Empty(t, baggage.FromContext(write(signed())).Member(otelsession.SignatureKey).Key())
		})
	}
}

// A display name that cannot be carried must never cost a message its thread:
// a long one is cut at a UTF-8 boundary, an unusable one dropped, both
// reported, and the identity is bound as given.
func TestDisplayFieldsNeverTakeRoutingDown(t *testing.T) {
	long := strings.Repeat("名", 200) // 600 bytes, over the 256-byte limit
	tests := []struct {
		name     string
		s        otelsession.Session
		field    otelsession.Field
		want     string
		wantErr  error
		wantKept otelsession.State
	}{
		{"long chat name", otelsession.Session{ChatID: "-100", ThreadID: "17585", ChatName: long},
			otelsession.FieldChatName, strings.Repeat("名", 85), otelsession.ErrValueTruncated, otelsession.Set},
		{"long user name", otelsession.Session{ChatID: "-100", ThreadID: "17585", UserName: "x" + long},
			otelsession.FieldUserName, "x" + strings.Repeat("名", 85), otelsession.ErrValueTruncated, otelsession.Set},
		{"user name with a line feed", otelsession.Session{ChatID: "-100", ThreadID: "17585", UserName: "eve\nadmin"},
			otelsession.FieldUserName, "", otelsession.ErrValueDropped, otelsession.Cleared},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.s.Validate(), "a display value is not a reason to refuse a session")
			ctx := otelsession.Bind(context.Background(), tt.s)
			v, st := otelsession.Lookup(ctx, tt.field)
			assert.Equal(t, tt.want, v)
			assert.Equal(t, tt.wantKept, st)
			assert.LessOrEqual(t, len(v), tt.field.Spec().MaxLen)
			assert.True(t, utf8.ValidString(v), "cut at a character boundary")
			thread, st := otelsession.Lookup(ctx, otelsession.FieldThreadID)
			assert.Equal(t, "17585", thread, "the routing identity is kept")
			assert.Equal(t, otelsession.Set, st)
		})
	}
	// Cutting is not refusing: errors.Is tells them apart.
	_, err := otelsession.ValidateValue(otelsession.FieldChatName.Spec(), long)
	assert.ErrorIs(t, err, otelsession.ErrValueTruncated)
	assert.NotErrorIs(t, err, otelsession.ErrInvalidValue)
}

func TestOwnedKey(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{
		"session.chat_id":       true,
		"session.future_field":  true,
		"SESSION.chat_id":       true,
		"Session.Chat_Id":       true,
		"session%2Echat_id":     true,
		"session%2echat_id":     true,
		"%73ession.chat_id":     true,
		"session%252Echat_id":   true, // decoded twice by two hops
		"session%25252Echat_id": true,
		"sessions.chat_id":      false,
		"session_chat_id":       false,
		"session":               false,
		"tenant":                false,
		"":                      false,
		"x-session.chat_id":     false,
		"session%2":             false,
		"session%zz.chat_id":    false,
		"%":                     false,
	} {
		assert.Equal(t, want, otelsession.OwnedKey(key), key)
	}
}

func TestTableIsConsistent(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, s := range otelsession.Specs() {
		assert.True(t, strings.HasPrefix(s.Key, otelsession.KeyPrefix), s.Key)
		assert.Equal(t, strings.ToLower(s.Key), s.Key)
		assert.False(t, seen[s.Key], "%s twice", s.Key)
		seen[s.Key] = true
		assert.True(t, otelsession.OwnedKey(s.Key))
		got, ok := otelsession.SpecOf(s.Key)
		require.True(t, ok)
		assert.Equal(t, s, got)
		if s.Field != 0 {
			assert.Equal(t, s, s.Field.Spec())
			assert.Equal(t, s.Class == otelsession.ClassLocal, s.Field.Scope() == otelsession.Local)
		}
		if s.Class == otelsession.ClassLocal {
			assert.False(t, s.Signed, "%s: a local key never travels, so it is never signed", s.Key)
		}
	}
}

// The table printed in the package documentation is the table in the code.
func TestDocumentedTableMatchesSpecs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	rows := map[string][]string{}
	for line := range strings.SplitSeq(string(doc), "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "//")); len(f) == 6 && strings.HasPrefix(f[0], otelsession.KeyPrefix) {
			rows[f[0]] = f
		}
	}
	specs := otelsession.Specs()
	require.Len(t, rows, len(specs), "one documented row per Spec")
	for _, s := range specs {
		env, signed := s.Env, "no"
		if env == "" {
			env = "-"
		}
		if s.Signed {
			signed = "yes"
		}
		want := []string{s.Key, env, s.Class.String(), strconv.Itoa(s.MaxLen), signed, s.Redact.String()}
		assert.Equal(t, want, rows[s.Key], "the documented row of %s", s.Key)
	}
}
