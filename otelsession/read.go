package otelsession

import (
	"context"
	"strings"
	"unsafe"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/internal/sessionstate"
)

// Lookup returns the value and state of f in ctx. A remote field is read from
// the context's baggage, whoever wrote it: a member valued "%00" on the wire
// (NUL once decoded) or empty is Cleared, an absent one Unset. A local field is
// read from the context's local session state and never from baggage. The
// value is "" unless the state is Set. Lookup does not fall back to the
// environment; [Getenv] does.
//
// A baggage that a writer of this package built, or that an inbound policy
// of package propagation accepted, is read from the record its builder left
// in the context beside it, without a look-up in OpenTelemetry's map; any
// other is looked up.
func Lookup(ctx context.Context, f Field) (string, State) {
	if !f.Valid() {
		return "", Unset
	}
	ctx = orBackground(ctx)
	if j := localIndex[f-1]; j >= 0 {
		return localState(ctx, j)
	}
	b := baggage.FromContext(ctx)
	if sessionstate.MayHaveRecord(b) {
		if r := sessionstate.RecordIn(ctx, b); r != nil {
			v, st := r.Field(int(f) - 1)
			return v, State(st)
		}
	}
	// memberState's body, written out: a call fewer on the read of a
	// baggage no sessionwire code built, which is to stay within 10% of
	// a bare Member(k).Value().
	m := b.Member(fieldKeys[f-1])
	switch v := m.Value(); {
	case v != "" && v != ClearedValue:
		return v, Set
	case v == "" && m.Key() == "":
		return "", Unset
	}
	return "", Cleared
}

// localState reads the local field in slot j of ctx's local state.
func localState(ctx context.Context, j int8) (string, State) {
	if l := localFrom(ctx); l != nil {
		return l.vals[j], l.st[j]
	}
	return "", Unset
}

// memberState reads the member key of b, a remote field's: absent is Unset,
// the Cleared marker or an empty value is Cleared. It takes the baggage and
// not a Member, and reads the member's key only when its value is empty:
// Go copies the 80-byte Member for every method called on it, and Lookup is
// to stay within 10% of a bare Member(k).Value().
func memberState(b baggage.Baggage, key string) (string, State) {
	m := b.Member(key)
	switch v := m.Value(); {
	case v != "" && v != ClearedValue:
		return v, Set
	case v == "" && m.Key() == "":
		return "", Unset
	}
	return "", Cleared
}

// Getenv is a drop-in for os.Getenv(name) at call sites that read a session
// variable by its legacy name, such as "HERMES_SESSION_THREAD_ID". When name is
// a field bound in ctx (Set or Cleared) it returns the bound value, "" for
// Cleared, and never consults the environment. Otherwise (the field is Unset,
// or name is not a session field) it returns the fallback environment's value
// when the variable exists, even if empty, and def when it does not.
func Getenv(ctx context.Context, name, def string) string {
	ctx = orBackground(ctx)
	// envByAddr, then envEntryOf, written out: a literal name costs one
	// multiplication and one load, where envEntryOf's hash of its bytes
	// cost a baggage no sessionwire code built about 5 points of a bare
	// baggage read (Getenv within 10% of it).
	e := envByAddr[envAddrSlot(name)]
	if e == nil || unsafe.StringData(e.name) != unsafe.StringData(name) || len(e.name) != len(name) {
		e = envEntryOf(name)
	}
	if e != nil {
		// Lookup's body, written out from the entry (which holds the
		// field's key and local slot, so that a bound name costs no other
		// table read and two calls fewer: Getenv within 10% of a bare
		// baggage read): only Unset falls through to the environment.
		if e.local >= 0 {
			if v, st := localState(ctx, e.local); st != Unset {
				return v
			}
		} else {
			b := baggage.FromContext(ctx)
			var r *sessionstate.Record
			if sessionstate.MayHaveRecord(b) {
				r = sessionstate.RecordIn(ctx, b)
			}
			if r != nil {
				if v, st := r.Field(int(e.f) - 1); st != sessionstate.Unset {
					return v
				}
			} else {
				// memberState's cases, as Getenv needs them.
				m := b.Member(e.key)
				switch v := m.Value(); {
				case v == ClearedValue:
					return "" // Cleared
				case v != "" || m.Key() != "":
					return v // Set, or Cleared by an empty value
				}
			}
		}
	}
	if v, ok := fallback.EnvFrom(ctx).LookupEnv(name); ok {
		return v
	}
	return def
}

// FromContext returns a snapshot of the session bound in ctx. It reports only
// what the context binds: Unset and Cleared fields are both "" (use [Lookup] to
// tell them apart, [Getenv] to fall back to the environment). The cron
// auto-deliver fields are not part of a Session.
func FromContext(ctx context.Context) Session {
	ctx = orBackground(ctx)
	// One reading of the context (Range), not one per field.
	var vals [numFields]string
	Range(ctx, func(f Field, v string, _ State) bool { vals[f-1] = v; return true })
	get := func(f Field) string { return vals[f-1] }
	s := Session{
		Platform:                      get(FieldPlatform),
		Source:                        get(FieldSource),
		ChatID:                        get(FieldChatID),
		ChatType:                      get(FieldChatType),
		ChatName:                      get(FieldChatName),
		ThreadID:                      get(FieldThreadID),
		UserID:                        get(FieldUserID),
		UserIDAlt:                     get(FieldUserIDAlt),
		UserName:                      get(FieldUserName),
		ScopeID:                       get(FieldScopeID),
		SessionKey:                    get(FieldSessionKey),
		SessionID:                     get(FieldSessionID),
		UISessionID:                   get(FieldUISessionID),
		MessageID:                     get(FieldMessageID),
		Profile:                       get(FieldProfile),
		BrowserControlPrincipal:       get(FieldBrowserControlPrincipal),
		BrowserControlTransportFamily: get(FieldBrowserControlTransportFamily),
		ParentChatID:                  get(FieldParentChatID),
		Cwd:                           Cwd(ctx),
		Stateless:                     declaredStateless(ctx),
	}
	switch _, st := Lookup(ctx, FieldCronSession); st {
	case Cleared:
		s.Cron = CronOff
	case Set:
		s.Cron = CronOn
	}
	return s
}

// Cwd returns the session's logical working directory, or "" when none is
// bound.
func Cwd(ctx context.Context) string {
	ctx = orBackground(ctx)
	if l := localFrom(ctx); l != nil {
		return l.cwd
	}
	return ""
}

// IsDelegatedChild reports whether ctx was derived from [WithDelegatedChild].
func IsDelegatedChild(ctx context.Context) bool {
	ctx = orBackground(ctx)
	l := localFrom(ctx)
	return l != nil && l.delegated
}

// nonMessagingSurfaces are platform and source values with no human chat
// channel behind them.
var nonMessagingSurfaces = map[string]bool{
	"": true, "api_server": true, "cli": true, "codex": true, "desktop": true,
	"gateway": true, "kanban": true, "local": true, "msgraph_webhook": true,
	"tool": true, "tui": true, "webhook": true,
}

// IsMessagingSurface reports whether this turn is delivered over a human
// messaging channel ("the user is reading a chat") rather than a machine the
// user owns. It checks HERMES_PLATFORM in the fallback environment, else the
// session platform, and the session source, each trimmed and lower-cased,
// against the surfaces that are not chat channels (cli, tui, desktop,
// api_server, webhook, …). It is default-deny: an identity it does not know
// counts as messaging, so a new chat platform is never treated as private.
func IsMessagingSurface(ctx context.Context) bool {
	ctx = orBackground(ctx)
	platform := fallback.Getenv(ctx, "HERMES_PLATFORM")
	if platform == "" {
		platform = Getenv(ctx, FieldPlatform.Name(), "")
	}
	for _, id := range [...]string{platform, Getenv(ctx, FieldSource.Name(), "")} {
		if id = strings.ToLower(strings.TrimSpace(id)); id != "" && !nonMessagingSurfaces[id] {
			return true
		}
	}
	return false
}

// AsyncDeliverySupported reports whether the session can receive a background
// completion after the turn ends. It is false when the channel was declared
// stateless ([Session.Stateless], [DeclareStatelessChannel]) and always false
// in a dispatcher-spawned Kanban worker (HERMES_KANBAN_TASK set in the fallback
// environment), whose parent is gone when a late completion arrives. Otherwise
// it is true: async delivery is opt-out.
func AsyncDeliverySupported(ctx context.Context) bool {
	ctx = orBackground(ctx)
	if fallback.Getenv(ctx, "HERMES_KANBAN_TASK") != "" {
		return false
	}
	return !declaredStateless(ctx)
}

func declaredStateless(ctx context.Context) bool {
	m := baggage.FromContext(ctx).Member(AsyncDeliveryKey)
	return m.Key() != "" && m.Value() == "0"
}

// Range calls fn for every field, in declaration order, with its value and
// state in ctx, until fn returns false. It reads the context once, so it is
// the cheap way to visit a whole session (span and log processors do).
func Range(ctx context.Context, fn func(f Field, value string, st State) bool) {
	ctx = orBackground(ctx)
	b := baggage.FromContext(ctx)
	l := localFrom(ctx)
	// A baggage with a record (a writer's, an inbound policy's) is read from
	// it, with no look-up at all; otherwise, once every member of b has been
	// found, the fields left are Unset without a look-up.
	rec := recordOf(ctx, b, l)
	found, n := 0, b.Len()
	for i := range numFields {
		var v string
		var st State
		if j := localIndex[i]; j >= 0 {
			if l != nil {
				v, st = l.vals[j], l.st[j]
			}
		} else if rec != nil {
			var s uint8
			v, s = rec.Field(i)
			st = State(s)
		} else if found < n {
			if v, st = memberState(b, fieldKeys[i]); st != Unset {
				found++
			}
		}
		if !fn(Field(i+1), v, st) {
			return
		}
	}
}

// RangeFields is [Range] over the listed fields only, in the order given: it
// reads the context once and looks up nothing else, so visiting a few fields
// of a large session costs a few look-ups (the span processor's default set
// does). Invalid fields are skipped.
func RangeFields(ctx context.Context, fields []Field, fn func(f Field, value string, st State) bool) {
	ctx = orBackground(ctx)
	b := baggage.FromContext(ctx)
	l := localFrom(ctx)
	n := b.Len()
	rec := recordOf(ctx, b, l) // as in Range
	for _, f := range fields {
		if !f.Valid() {
			continue
		}
		var v string
		var st State
		if j := localIndex[f-1]; j >= 0 {
			if l != nil {
				v, st = l.vals[j], l.st[j]
			}
		} else if rec != nil {
			var s uint8
			v, s = rec.Field(int(f) - 1)
			st = State(s)
		} else if n > 0 {
			v, st = memberState(b, fieldKeys[f-1])
		}
		if !fn(f, v, st) {
			return
		}
	}
}

// envEntry is what Getenv needs of a field it finds by legacy name.
type envEntry struct {
	name  string // the legacy name
	key   string // the member key of a remote field
	f     Field
	local int8 // the local state's slot of a local field, -1 for a remote one
}

// envSlots is an open-addressing table of the fields by legacy name: Getenv
// sits on hot paths, and three bytes and the length find a name here faster
// than a map hashes all of it (Getenv within 10% of a bare baggage read).
var envSlots = func() (t [64]envEntry) {
	for i := range table {
		s := &table[i]
		if s.Field == 0 {
			continue
		}
		j := envSlot(s.Env)
		for t[j].f != 0 {
			j = (j + 1) % uint(len(t))
		}
		t[j] = envEntry{name: s.Env, key: s.Key, f: s.Field, local: localIndex[s.Field-1]}
	}
	return t
}()

// envSlot is name's home slot. Unsigned, so the modulo is a mask.
func envSlot(name string) uint {
	n := uint(len(name))
	if n < 2 {
		return n
	}
	return (n + 31*uint(name[n-1]) + 7*uint(name[n-2]) + uint(name[n/2])) % 64
}

// envEntryOf returns the entry of the field whose legacy name is name, nil
// when none.
func envEntryOf(name string) *envEntry {
	for j := envSlot(name); envSlots[j].f != 0; j = (j + 1) % uint(len(envSlots)) {
		// A caller's literal is the table's own string (the linker keeps
		// one copy of each): the same bytes are known the same without
		// comparing them.
		if e := &envSlots[j]; len(e.name) == len(name) && (unsafe.StringData(e.name) == unsafe.StringData(name) || e.name == name) {
			return e
		}
	}
	return nil
}

// envByAddr holds the entries by the address of their legacy name's bytes
// (envAddrSlot). The Go linker keeps one copy of each string constant in a
// program, so a caller's literal "HERMES_SESSION_THREAD_ID" is the table's
// own string, at the table's own address: Getenv finds it here with one
// multiplication and one load, where envEntryOf reads three of its bytes
// and probes. Any other name (built at run time) is envEntryOf's to find:
// the address only ever decides how fast, never what is found.
//
// The multiplier is the first of a fixed sequence of odd numbers
// (envAddrMultiplier) under which no two names share a slot, searched once
// at start-up, since where the linker puts the names differs from one
// program to the next; with 25 names in 256 slots about one multiplier in
// three will do. Should none of envAddrTries do, names that share a slot
// are left to envEntryOf, the first one kept (TestEnvByAddrFindsEveryName).
var envAddrMul, envByAddr = func() (uint64, [envAddrSlots]*envEntry) {
	var t [envAddrSlots]*envEntry
	var m uint64
	for try := range envAddrTries {
		m = envAddrMultiplier(uint64(try))
		t = [envAddrSlots]*envEntry{}
		clash := false
		for j := range envSlots {
			e := &envSlots[j]
			if e.f == 0 {
				continue
			}
			if i := envAddrSlotOf(e.name, m); t[i] == nil {
				t[i] = e
			} else {
				clash = true
			}
		}
		if !clash {
			break
		}
	}
	return m, t
}()

// envAddrMultiplier is the i-th multiplier envByAddr tries: SplitMix64's
// output for i, made odd. Multipliers that differ in their high bits, as
// these do, spread the names differently; ones that differ only in their low
// bits, as consecutive odd numbers do, give the same high bits of the
// product for addresses this close together.
func envAddrMultiplier(i uint64) uint64 {
	z := (i + 1) * 0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return (z ^ z>>31) | 1
}

// envAddrSlot is the slot of envByAddr that name's bytes hash to by their
// address.
func envAddrSlot(name string) uintptr { return envAddrSlotOf(name, envAddrMul) }

// envAddrSlotOf is envAddrSlot under multiplier m (multiplicative hashing:
// the product's high bits). The address is only hashed, never turned back
// into a pointer.
func envAddrSlotOf(name string, m uint64) uintptr {
	return uintptr(uint64(uintptr(unsafe.Pointer(unsafe.StringData(name)))) * m >> (64 - envAddrBits))
}

// envAddrBits sizes envByAddr: 256 slots for the two dozen names, 2 KiB.
// envAddrTries bounds the search for a multiplier.
const (
	envAddrBits  = 8
	envAddrSlots = 1 << envAddrBits
	envAddrTries = 1024
)

// fieldByEnv returns the field whose legacy name is name, 0 when none.
func fieldByEnv(name string) Field {
	if e := envEntryOf(name); e != nil {
		return e.f
	}
	return 0
}

// orBackground is ctx, or context.Background() for a nil one: a reader takes
// a nil context as Bind, Clear and Reset do, as an empty one.
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}
