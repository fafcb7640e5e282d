package otelsession

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/fallback"
	"github.com/sessionwire/sessionwire/internal/sessionmetrics"
	"github.com/sessionwire/sessionwire/internal/sessionstate"
)

// Bind returns a copy of ctx bound to s: every session field (the nineteen
// fields of Session except the cron marker) Set to its value, or Cleared where
// the value is empty; the cron marker as s.Cron says; the logical working
// directory; and the async-delivery capability. The cron auto-deliver fields
// and every baggage member that is not a session field are left as they are.
// Bind latches [Engaged].
//
// Bind never binds part of a session. If a value is refused (see
// [Session.Validate]), every session field is bound Cleared instead, so nothing
// stale or half-built can be read, and the reason is reported to otel.Handle.
// If the baggage already in ctx leaves no room for the session within the W3C
// limits, members that are not session fields are dropped, largest first, and
// the drop is reported the same way.
//
// A session bound before (the same values, the message id aside) is bound
// from a small bounded cache: see [BindCache].
func Bind(ctx context.Context, s Session) context.Context {
	if !engaged.Load() {
		engaged.Store(true)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if bindTab.Load() == nil {
		return bindBuilt(ctx, s, nil)
	}
	h := sessionHash(&s)
	var k keptMembers
	if out, ok := bindCached(ctx, &s, h, &k); ok {
		return out
	}
	bindMisses.Add(1)
	return bindBuilt(ctx, s, &cacheKey{h, &k})
}

// cacheKey is what bindBuilt needs to cache the session it builds: its
// hash, and what Bind keeps of the context's baggage, if already read.
type cacheKey struct {
	h    uint64
	kept *keptMembers
}

// bindBuilt is Bind without the cache's look-up: it builds the session and,
// given the session's cache key, remembers it.
func bindBuilt(ctx context.Context, s Session, key *cacheKey) context.Context {
	e, errs, notes := bindEdit(s)
	if len(errs) > 0 {
		otel.Handle(fmt.Errorf("otelsession: bind: session bound as cleared: %w", errors.Join(errs...)))
		e.clearValues(e.whole)
	}
	for _, n := range notes {
		noteDisplay(n.key, n.err, "bind")
	}
	if len(errs) > 0 || len(notes) > 0 || key == nil {
		return e.apply(ctx, "bind")
	}
	if app, ok := mergesFromCache(ctx, &e, key); ok {
		if out, ok := bindAloneAndMerge(ctx, &s, key.h, e, app); ok {
			return out
		}
	}
	// apply clears e when the session does not fit; remember checks the
	// edit as built.
	built := e
	out := e.apply(ctx, "bind")
	remember(&s, key.h, &built, out)
	return out
}

// bindAloneAndMerge binds the session of the edit e alone, caches it, and
// merges app, the application's members in ctx, into it as a later Bind
// of it will (bindFrom): the second Bind of a session over such members
// (mergesFromCache). The session fits by the cheap bound, so binding it
// alone reports nothing that bindBuilt, should the merge not be possible,
// would report again. It is a function of its own, which keeps bindBuilt's
// frame as it was for every other Bind.
//
//go:noinline
func bindAloneAndMerge(ctx context.Context, s *Session, h uint64, e edit, app []baggage.Member) (context.Context, bool) {
	built := e
	alone := e.apply(baggage.ContextWithoutBaggage(ctx), "bind")
	remember(s, h, &built, alone)
	if ent := cachedEntry(s, h); ent != nil {
		return bindFrom(ctx, ent, s, app)
	}
	return ctx, false
}

// mergesFromCache returns the members of the application's in ctx, and
// true, when Bind of the edit e over ctx, which is to be cached, is to be
// bound alone and merged from the cache: ctx holds members of the
// application's that the cache merges (bindKeeps), is not a delegated
// child's (whose state the cache does not keep), the session fits the W3C
// limit by the cheap bound, and it was bound so before (seenBefore).
func mergesFromCache(ctx context.Context, e *edit, key *cacheKey) ([]baggage.Member, bool) {
	old := baggage.FromContext(ctx)
	t := bindTab.Load()
	if old.Len() == 0 || t == nil {
		return nil, false
	}
	app, ok := key.kept.of(old)
	if !ok || len(app) == 0 {
		return nil, false
	}
	if l := localFrom(ctx); l != nil && l.delegated {
		return nil, false
	}
	if _, _, fits := editBound(e); !fits {
		return nil, false
	}
	// A session's first Bind over them builds it with the members, as
	// without the cache: binding it alone and merging costs more, and
	// pays only from its third Bind on. The second makes the entry.
	return app, t.seenBefore(key.h)
}

// Clear returns a copy of ctx in which every session field is Cleared (the
// cron marker too): reads return "" and never fall back to the environment.
// Async delivery returns to its default (supported) and the working directory
// is cleared; the cron auto-deliver fields are left as they are. Call it when
// the handler of a message finishes.
func Clear(ctx context.Context) context.Context {
	var e edit
	for i := range numFields {
		if table[i].InSession {
			e.op[i] = opSet
		}
	}
	e.async = opUnset
	e.cwd = opSet
	return e.apply(ctx, "clear")
}

// Reset returns a copy of ctx in which every field, the cron auto-deliver
// fields too, is Unset, async delivery is back to its default and the working
// directory is cleared: what a new unit of work must look like before it binds
// its own session. Call it where work starts from an inherited context (a
// worker goroutine, a consumed message, an inbound request), so that a
// session bound by whoever created that context cannot leak into it.
// Members that are not session fields pass through. The delegated-child mark
// belongs to the agent structure, not to the session, and is kept.
func Reset(ctx context.Context) context.Context {
	var e edit
	for i := range numFields {
		e.op[i] = opUnset
	}
	e.async = opUnset
	e.cwd = opSet
	return e.apply(ctx, "reset")
}

// With returns a copy of ctx with one field bound: Set to value, or Cleared
// when value is "". Other fields are unchanged. It is how a cron job binds its
// auto-deliver target. A value that [Session.Validate] would refuse binds the
// field Cleared and is reported to otel.Handle; an invalid Field changes
// nothing and is reported the same way.
func With(ctx context.Context, f Field, value string) context.Context {
	if !f.Valid() {
		otel.Handle(fmt.Errorf("otelsession: with field %d: %w", f, ErrUnknownField))
		return ctx
	}
	var e edit
	e.op[f-1], e.val[f-1] = opSet, checked(f, value, "with")
	return e.apply(ctx, "with "+f.Key())
}

// WithSessionID returns a copy of ctx whose session id is id ("" binds it
// Cleared). In a root context it also mirrors id into HERMES_SESSION_ID of
// the fallback environment (the process environment unless
// fallback.WithEnv says otherwise), so that code reading the environment
// directly moves with it; in a delegated child ([WithDelegatedChild]) it never
// does. A failed mirror is reported to otel.Handle. To scope an id to some
// work, derive a context: the parent's id is untouched.
func WithSessionID(ctx context.Context, id string) context.Context {
	ctx = With(ctx, FieldSessionID, id)
	if !IsDelegatedChild(ctx) {
		v, _ := Lookup(ctx, FieldSessionID)
		if err := fallback.MirrorSessionID(fallback.EnvFrom(ctx), v); err != nil {
			otel.Handle(fmt.Errorf("otelsession: %w", err))
		}
	}
	return ctx
}

// WithDelegatedChild returns a copy of ctx marked as a delegated child (a
// subagent built inside its parent's process) and bound to the child's session
// id. A child without an id of its own (id "") keeps its parent's session id,
// as the original's delegated_child_context(None) does: it is the parent's
// work the child does until it is given an id. To bind a child's id Cleared,
// call [WithSessionID] with "" on the returned context, which never mirrors
// it. WithDelegatedChild never writes the process environment: the parent's
// HERMES_SESSION_ID stays in place for the rest of the process.
func WithDelegatedChild(ctx context.Context, id string) context.Context {
	var e edit
	if id != "" {
		e.op[FieldSessionID-1], e.val[FieldSessionID-1] = opSet, checked(FieldSessionID, id, "delegated child")
	}
	e.delegate = true
	return e.apply(ctx, "delegated child")
}

// CronJob is a cron job's persisted identity, as [WithCronJob] binds it: the
// job and where it was created. It is not the live sender session (a job's
// stored origin authorizes the job; nobody is chatting), which is why it has
// fields of its own beside the session's.
type CronJob struct {
	// ID is the job's id (HERMES_CRON_JOB_ID).
	ID string
	// OriginPlatform is the platform the job was created from
	// (HERMES_CRON_JOB_ORIGIN_PLATFORM).
	OriginPlatform string
	// OriginUserID is the user who created the job
	// (HERMES_CRON_JOB_ORIGIN_USER_ID). The original scheduler uses the
	// origin's chat id when the origin has no user id; so should callers.
	OriginUserID string
}

// WithCronJob returns a copy of ctx bound to the identity of the cron job it
// runs: the three cron job fields Set to job's values, or Cleared where a
// value is empty, in one write. A scheduler calls it once per job run, on the
// context the run starts from (after [Reset]); WithCronJob(ctx, CronJob{})
// clears the identity, so that later work on the same context cannot inherit
// a finished job. [Bind] and [Clear] leave these fields alone, as they leave
// the cron auto-deliver fields; Reset makes them Unset. Like every field they
// reach child processes ([execsession]) and the next hop in baggage.
//
// WithCronJob never binds part of a job: if a value is refused (see
// [Session.Validate]), all three fields are bound Cleared and the reason is
// reported to otel.Handle.
//
// [execsession]: https://pkg.go.dev/github.com/sessionwire/sessionwire/propagation/execsession
func WithCronJob(ctx context.Context, job CronJob) context.Context {
	var e edit
	var errs []error
	for _, b := range [...]struct {
		f Field
		v string
	}{{FieldCronJobID, job.ID}, {FieldCronJobOriginUserID, job.OriginUserID}, {FieldCronJobOriginPlatform, job.OriginPlatform}} {
		e.op[b.f-1], e.val[b.f-1] = opSet, b.v
		if b.v != "" {
			if _, err := ValidateValue(table[b.f-1], b.v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		otel.Handle(fmt.Errorf("otelsession: cron job: bound as cleared: %w", errors.Join(errs...)))
		e.clearValues(false)
	}
	return e.apply(ctx, "cron job")
}

// WithCwd returns a copy of ctx whose logical working directory is dir (""
// clears it), leaving every field as it is. It is how a child process restores
// the directory its parent's session ran in; a handler binds it with
// [Session.Cwd]. A value that [Session.Validate] would refuse binds "" and is
// reported to otel.Handle.
func WithCwd(ctx context.Context, dir string) context.Context {
	if _, err := ValidateValue(cwdSpec(), dir); err != nil {
		otel.Handle(fmt.Errorf("otelsession: with cwd: cleared: %w", err))
		dir = ""
	}
	e := edit{cwd: opSet, cwdVal: dir}
	return e.apply(ctx, "with cwd")
}

// DeclareStatelessChannel returns a copy of ctx whose channel cannot receive a
// completion after the turn ends, so [AsyncDeliverySupported] reports false.
// It binds only that capability and, unlike Bind, does not latch [Engaged]: a
// one-shot command-line run can declare itself stateless without switching
// the process to context-authoritative mode.
func DeclareStatelessChannel(ctx context.Context) context.Context {
	e := edit{async: opSet}
	return e.apply(ctx, "declare stateless channel")
}

// checked returns the value a single-field writer binds for f: value when
// valid, a display value cut or dropped (reported), "" (Cleared) for a
// refused value (reported).
func checked(f Field, value, what string) string {
	v, err := ValidateValue(table[f-1], value)
	switch {
	case err == nil:
	case errors.Is(err, ErrInvalidValue):
		otel.Handle(fmt.Errorf("otelsession: %s: field bound as cleared: %w", what, err))
		v = ""
	default:
		noteDisplay(f.Key(), err, what)
	}
	return v
}

// noteDisplay counts a display value cut or dropped, and reports each kind
// once per key and process: the same long chat name on every message of a
// conversation would otherwise flood the error handler.
func noteDisplay(key string, err error, direction string) {
	outcome := "truncated"
	if errors.Is(err, ErrValueDropped) {
		outcome = "dropped"
	}
	sessionmetrics.Value(key, outcome, direction)
	if _, loaded := displayReported.LoadOrStore(key+"\x00"+outcome, struct{}{}); !loaded {
		otel.Handle(fmt.Errorf("otelsession: %s (reported once per field): %w", direction, err))
	}
}

var displayReported sync.Map // key and outcome -> struct{}

// displayNote is a display value a writer cut or dropped.
type displayNote struct {
	key string
	err error
}

// op is what an edit does to one piece of session state.
type op uint8

const (
	opKeep  op = iota // leave as it is
	opUnset           // remove
	opSet             // bind the edit's value ("" = Cleared)
)

// edit is one write to a context's session. Every exported writer fills one
// and calls apply, so that the baggage is rebuilt in a single pass and the
// local part copied once.
type edit struct {
	op       [numFields]op
	val      [numFields]string
	async    op // opSet = stateless
	cwd      op
	cwdVal   string
	delegate bool
	whole    bool // binds a whole session: refused values clear all of it
}

// clearValues turns every value the edit sets into Cleared; with session it
// also binds every session field the edit would leave Unset as Cleared.
func (e *edit) clearValues(session bool) {
	for i := range numFields {
		e.val[i] = ""
		if session && table[i].InSession {
			e.op[i] = opSet
		}
	}
	e.cwdVal = ""
}

func (e *edit) apply(ctx context.Context, what string) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	remote, localChange := e.async != opKeep, e.cwd != opKeep || e.delegate
	for i := range numFields {
		if e.op[i] != opKeep {
			if localIndex[i] >= 0 {
				localChange = true
			} else {
				remote = true
			}
		}
	}
	var checked baggage.Baggage
	var present, oldChecked bool
	var foreign []string
	if remote {
		old := baggage.FromContext(ctx)
		oldLocal := localFrom(ctx)
		oldChecked = oldLocal != nil && sameBaggage(old, oldLocal.rec.B)
		b, kept, appKeys, err := e.baggage(old)
		if errors.Is(err, ErrSessionTooLarge) {
			otel.Handle(fmt.Errorf("otelsession: %s: session bound as cleared: %w", what, err))
			e.clearValues(e.whole)
			b, kept, appKeys, err = e.baggage(old)
		}
		if err != nil {
			otel.Handle(fmt.Errorf("otelsession: %s: %w", what, err))
		}
		ctx = baggage.ContextWithBaggage(ctx, b)
		if (!kept || oldChecked) && err == nil {
			// Every session member of b is one this edit validated, or one
			// kept from a baggage a writer had checked.
			checked, present = b, kept || hasMember(e)
			foreign = appKeys
			// Record it even when the edit changes nothing local (With on a
			// remote field over a bound session): a copy of the local state
			// spares every outbound policy a second reading.
			localChange = localChange || oldChecked
		}
	}
	if localChange {
		// The new state, and beside it in the same allocation the values
		// of its record when it records a baggage of its own.
		var l *local
		var vals *sessionstate.Values
		if remote && checked.Len() > 0 {
			lv := new(localValues)
			l, vals = &lv.local, &lv.vals
		} else {
			l = new(local)
		}
		if old := localFrom(ctx); old != nil {
			*l = *old
			if !remote && l.rec.B.Len() > 0 && !sameBaggage(baggage.FromContext(ctx), l.rec.B) {
				// The copy records a baggage the context no longer holds:
				// it would shadow the record of the one it does hold (an
				// inbound policy's), which the new state's context then
				// leaves its readers to find.
				l.rec, l.checkedPresent = sessionstate.Record{}, false
				l.setAppKeys(nil)
			}
		}
		for i := range numFields {
			j := localIndex[i]
			if j < 0 {
				continue
			}
			switch e.op[i] {
			case opUnset:
				l.vals[j], l.st[j] = "", Unset
			case opSet:
				l.vals[j], l.st[j] = e.val[i], Cleared
				if e.val[i] != "" {
					l.st[j] = Set
				}
			}
		}
		if e.cwd == opSet {
			l.cwd = e.cwdVal
		}
		l.delegated = l.delegated || e.delegate
		if remote {
			// Recorded or forgotten: the baggage is new either way.
			l.checkedPresent = present
			l.setAppKeys(foreign)
			if vals == nil {
				l.rec = sessionstate.Record{B: checked}
			} else {
				// The record is made (a state answers the record key only
				// for a baggage with members): RecordOf is told of it.
				sessionstate.Recorded(checked)
				// What checked holds: the fields this edit wrote, over those
				// kept from the checked baggage before it, whose record l
				// copied from the old state; without one, nothing was kept.
				if oldChecked {
					l.rec.Write(vals)
				} else {
					l.rec.WriteFresh(vals)
				}
				l.rec.B = checked
				for _, f := range remoteFields {
					switch i := int(f) - 1; e.op[i] {
					case opUnset:
						l.rec.SetUnset(i)
					case opSet:
						l.setRemote(i, e.val[i])
					}
				}
			}
		}
		ctx = withLocal(ctx, l)
	}
	return ctx
}

// baggage builds old with the edit's remote changes. Session members are
// placed first and are never dropped; members that are not session fields
// follow in old's order and are dropped, largest first, only when the whole
// does not fit the W3C limits.
//
// kept reports whether a member in the session namespace was kept from old
// rather than set by the edit (its value then was not checked here).
// appKeys are the keys of the members b holds that are not the session's
// (the application's, kept from old), nil when there are none: what lets
// wireLine write them beside the record's.
func (e *edit) baggage(old baggage.Baggage) (b baggage.Baggage, kept bool, appKeys []string, err error) {
	// Room for what is set and what can be kept of old: Reset and Clear
	// keep none of the session, and Reset runs for every session an
	// outbound policy withholds, so room is not made for members that go.
	n := 0
	for _, f := range remoteFields {
		if e.op[f-1] == opSet {
			n++
		}
	}
	if e.async == opSet {
		n++
	}
	var oldMembers []baggage.Member
	if old.Len() > 0 {
		oldMembers = old.Members()
		for _, m := range oldMembers {
			k := m.Key()
			if !OwnedKey(k) {
				n++
			} else if s := specByKey[k]; s != nil && (s.Field != 0 && e.op[s.Field-1] == opKeep || s.Key == AsyncDeliveryKey && e.async == opKeep) {
				n++
			}
		}
	}
	if n == 0 {
		return baggage.Baggage{}, false, nil, nil
	}
	// A session and a few members of the application's fit on the stack:
	// the slice is only read by baggage.New, which copies what it keeps.
	var buf [2 * NumFields]baggage.Member
	members := buf[:0]
	if n > len(buf) {
		members = make([]baggage.Member, 0, n)
	}
	add := func(key, value string) {
		// Keys are constants and values were checked; NewMemberRaw cannot
		// fail here, and a member that did would simply be left out.
		if m, err := baggage.NewMemberRaw(key, value); err == nil {
			members = append(members, m)
		}
	}
	addField := func(f Field, value string) {
		if value == ClearedValue {
			// Most sessions leave several fields Cleared: their members are
			// built once.
			members = append(members, clearedMembers[f-1])
			return
		}
		add(fieldKeys[f-1], value)
	}
	for _, f := range remoteFields {
		i, key := f-1, fieldKeys[f-1]
		switch e.op[i] {
		case opKeep:
			// Rebuilt without properties: session members carry none.
			if m := old.Member(key); m.Key() != "" {
				addField(f, m.Value())
				kept = true
			}
		case opSet:
			v := e.val[i]
			if v == "" {
				v = ClearedValue
			}
			addField(f, v)
		}
	}
	switch e.async {
	case opKeep:
		if m := old.Member(AsyncDeliveryKey); m.Key() != "" {
			add(AsyncDeliveryKey, m.Value())
			kept = true
		}
	case opSet:
		add(AsyncDeliveryKey, "0")
	}
	nSession := len(members)
	for _, m := range oldMembers {
		if !OwnedKey(m.Key()) {
			members = append(members, m)
		}
	}
	members, err = fit(members, nSession)
	if err != nil && errors.Is(err, ErrSessionTooLarge) {
		return old, kept, nil, err
	}
	if len(members) > nSession {
		appKeys = make([]string, 0, len(members)-nSession)
		for _, m := range members[nSession:] {
			appKeys = append(appKeys, m.Key())
		}
	}
	b, newErr := baggage.New(members...)
	return b, kept, appKeys, errors.Join(err, newErr)
}

// clearedMembers holds each remote field's Cleared member, indexed by
// Field-1 (the zero Member for local fields, never used).
// Built from table itself, which package initialization orders before it
// (remoteFields and fieldKeys are filled later, by init).
var clearedMembers = func() (ms [numFields]baggage.Member) {
	for _, s := range table {
		if s.Field == 0 || !s.Baggage() {
			continue
		}
		m, err := baggage.NewMemberRaw(s.Key, ClearedValue)
		if err != nil {
			panic("otelsession: the Cleared member of " + s.Key + ": " + err.Error())
		}
		ms[s.Field-1] = m
	}
	return ms
}()

// hasMember reports whether the baggage e builds holds a session member of
// its own: a field or the async capability it sets.
func hasMember(e *edit) bool {
	for _, f := range remoteFields {
		if e.op[f-1] == opSet {
			return true
		}
	}
	return e.async == opSet
}

// fit drops members after the first nSession until the list fits the W3C
// limits. Sizes are first bounded cheaply (a session value encodes to at most
// three bytes per byte); exact encodings are computed only near the limit.
func fit(members []baggage.Member, nSession int) ([]baggage.Member, error) {
	if len(members) <= MaxBaggageMembers {
		total := len(members) - 1 // commas
		for _, m := range members[:nSession] {
			total += len(m.Key()) + 1 + 3*len(m.Value())
		}
		for _, m := range members[nSession:] {
			total += len(m.String())
		}
		if total <= MaxBaggageBytes {
			return members, nil
		}
	}
	size := make([]int, len(members))
	sessionBytes := nSession - 1
	total := len(members) - 1
	for i, m := range members {
		size[i] = len(m.String())
		total += size[i]
		if i < nSession {
			sessionBytes += size[i]
		}
	}
	if sessionBytes > MaxBaggageBytes {
		return members, fmt.Errorf("%d encoded bytes, limit %d: %w", sessionBytes, MaxBaggageBytes, ErrSessionTooLarge)
	}
	foreign := make([]int, 0, len(members)-nSession)
	for i := nSession; i < len(members); i++ {
		foreign = append(foreign, i)
	}
	slices.SortFunc(foreign, func(a, b int) int {
		if c := cmp.Compare(size[b], size[a]); c != 0 {
			return c
		}
		return strings.Compare(members[a].Key(), members[b].Key())
	})
	drop := make(map[int]bool)
	count := len(members)
	for _, i := range foreign {
		if count <= MaxBaggageMembers && total <= MaxBaggageBytes {
			break
		}
		drop[i] = true
		count--
		total -= size[i] + 1
	}
	if len(drop) == 0 {
		return members, nil
	}
	kept := members[:0:0]
	var dropped []string
	for i, m := range members {
		if drop[i] {
			dropped = append(dropped, m.Key())
			continue
		}
		kept = append(kept, m)
	}
	slices.Sort(dropped)
	return kept, fmt.Errorf("%d members (%s): %w", len(dropped), strings.Join(dropped, ", "), ErrForeignMembersDropped)
}
