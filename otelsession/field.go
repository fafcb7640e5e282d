package otelsession

import (
	"fmt"
	"strings"
)

// Field is one session field: a legacy environment name, a key, a class and
// the limits of its value. The zero Field is not a field; the exported Field
// values below are the whole schema.
type Field uint8

// The session fields. The first nineteen are the ones [Bind] binds and [Clear]
// clears; then come the three cron auto-deliver targets, bound one by one with
// [With], and the three of a cron job's persisted identity, bound together
// with [WithCronJob].
const (
	FieldPlatform Field = iota + 1
	FieldSource
	FieldChatID
	FieldChatType
	FieldChatName
	FieldThreadID
	FieldUserID
	FieldUserIDAlt
	FieldUserName
	FieldScopeID
	FieldSessionKey
	FieldSessionID
	FieldUISessionID
	FieldMessageID
	FieldProfile
	FieldBrowserControlPrincipal
	FieldBrowserControlTransportFamily
	FieldCronSession
	FieldParentChatID
	FieldCronAutoDeliverPlatform
	FieldCronAutoDeliverChatID
	FieldCronAutoDeliverThreadID
	FieldCronJobID
	FieldCronJobOriginUserID
	FieldCronJobOriginPlatform

	fieldEnd // one past the last field
)

// numFields is the number of fields; field f's index in per-field arrays is f-1.
const numFields = int(fieldEnd) - 1

// NumFields is the number of fields, for arrays indexed by Field-1 that
// other packages size at compile time.
const NumFields = numFields

// Class says what a key is for, and so how it travels and what happens to a
// value that cannot be carried.
type Class uint8

const (
	// ClassIdentity keys identify and route the conversation (platform, chat,
	// thread, user, scope, message anchor, …). They are baggage members. A
	// value that cannot be carried refuses the whole session, at Bind and at
	// every receiving edge alike: never a partial mix of two sessions.
	ClassIdentity Class = iota + 1
	// ClassDisplay keys are shown to people (the chat's and the user's
	// names). They are baggage members, but a bad value must never cost a
	// message its routing: a too-long value is cut at a UTF-8 boundary and an
	// unusable one is dropped (bound Cleared), both reported and counted,
	// and the rest of the session is kept.
	ClassDisplay
	// ClassLocal keys never leave the process over the network: they are
	// kept in the context beside the baggage, not in it, so no propagator
	// can send them, and the inbound policy refuses them from a peer. Child
	// processes (the same trust domain) receive them through the environment.
	ClassLocal
	// ClassControl keys are not fields but belong to the session: the
	// async-delivery capability and the signature.
	ClassControl
)

func (c Class) String() string {
	switch c {
	case ClassIdentity:
		return "identity"
	case ClassDisplay:
		return "display"
	case ClassLocal:
		return "local"
	case ClassControl:
		return "control"
	}
	return "invalid"
}

// Scope says where a field may travel. It follows from the field's [Class]:
// local fields are Local, all others Remote.
type Scope uint8

const (
	// Remote fields are baggage members: every OTel propagator forwards them
	// across HTTP, queues and child processes.
	Remote Scope = iota + 1
	// Local fields stay in the process: they are kept in the context beside
	// the baggage, never in it, so no propagator can send them over the
	// network. Child processes (same trust domain) receive them through the
	// environment.
	Local
)

func (s Scope) String() string {
	switch s {
	case Remote:
		return "remote"
	case Local:
		return "local"
	}
	return "invalid"
}

// Redact is what span and log processors do with a key's value by default
// (package sessiontrace can override it per field).
type Redact uint8

const (
	// RedactCopy records the value as it is.
	RedactCopy Redact = iota
	// RedactHash records a keyed hash of the value (dropped without a key).
	RedactHash
	// RedactDrop records nothing.
	RedactDrop
)

func (r Redact) String() string {
	switch r {
	case RedactCopy:
		return "copy"
	case RedactHash:
		return "hash"
	case RedactDrop:
		return "drop"
	}
	return "invalid"
}

// Limits of one value, in bytes before percent-encoding.
const (
	// MaxValueBytes bounds the value of an identifier (chat, thread, user,
	// message, session key): the longest value any key but the working
	// directory accepts.
	MaxValueBytes = 512
	// maxNameBytes bounds a platform, source, chat type or profile name.
	maxNameBytes = 64
	// maxDisplayBytes bounds a display name; a longer one is cut.
	maxDisplayBytes = 256
	// maxCwdBytes bounds the working directory: PATH_MAX on Linux.
	maxCwdBytes = 4096
)

// Spec is one row of the wire-key table: everything sessionwire knows about
// one key of the session namespace. Binding, the inbound and outbound
// policies, signing, redaction on spans and logs, the child-process
// environment and the operator tools all read this one table ([Specs]);
// adding a field is adding a row.
type Spec struct {
	// Key is the key on the wire and on spans and logs, such as
	// "session.chat_id". Every key starts with [KeyPrefix].
	Key string
	// Env is the legacy environment variable, such as
	// "HERMES_SESSION_CHAT_ID": what [Getenv] reads by name and what a child
	// process receives.
	Env string
	// Field is the field the key belongs to; 0 for the keys that are not
	// fields (the async-delivery capability, the signature, the working
	// directory).
	Field Field
	// Class says how the key travels and what happens to a bad value.
	Class Class
	// MaxLen bounds the value, in bytes before percent-encoding.
	MaxLen int
	// Signed reports whether a signature covers the key (every key that
	// travels as baggage, but the signature itself).
	Signed bool
	// Redact is the default treatment of the value on spans and logs.
	Redact Redact
	// InSession reports whether [Bind] binds the key and [Clear] clears it.
	InSession bool
}

// Baggage reports whether the key travels as a baggage member.
func (s Spec) Baggage() bool { return s.Class != ClassLocal }

// KeyPrefix starts every sessionwire key, in baggage and in attributes. The
// namespace is owned: a member whose key, percent-decoded and case-folded,
// starts with it is a session member whatever its spelling (see
// [OwnedKey]).
const KeyPrefix = "session."

// Keys that are not fields.
const (
	// AsyncDeliveryKey is the baggage member that records a stateless
	// channel (value "0"). Absent means async delivery is supported.
	AsyncDeliveryKey = KeyPrefix + "async_delivery"
	// CwdKey names the session's logical working directory in spans, logs and
	// tools. Like the local fields it is never a baggage member.
	CwdKey = KeyPrefix + "cwd"
	// SignatureKey is the baggage member that carries a signature over the
	// session's members (see package propagation). Every writer in this
	// package removes it: a session that changed is no longer the one that
	// was signed.
	SignatureKey = KeyPrefix + "sig"
	// CwdEnv is the environment variable a child process receives the
	// working directory in.
	CwdEnv = "SESSIONWIRE_CWD"
	// maxSignatureBytes bounds a signature value; package propagation
	// parses it strictly.
	maxSignatureBytes = 128
)

// table is the one declaration every behaviour is driven by: the fields in
// Field order (their keys derived from the legacy name), then the keys that
// are not fields.
var table = func() []Spec {
	f := func(env string, class Class, max int, session bool) Spec {
		key := strings.ToLower(strings.TrimPrefix(env, "HERMES_"))
		key = KeyPrefix + strings.TrimPrefix(key, "session_")
		return Spec{Key: key, Env: env, Class: class, MaxLen: max, Signed: class != ClassLocal, InSession: session}
	}
	userName := f("HERMES_SESSION_USER_NAME", ClassDisplay, maxDisplayBytes, true)
	userName.Redact = RedactHash
	principal := f("HERMES_BROWSER_CONTROL_PRINCIPAL", ClassLocal, MaxValueBytes, true)
	principal.Redact = RedactHash
	t := []Spec{
		f("HERMES_SESSION_PLATFORM", ClassIdentity, maxNameBytes, true),
		f("HERMES_SESSION_SOURCE", ClassIdentity, maxNameBytes, true),
		f("HERMES_SESSION_CHAT_ID", ClassIdentity, MaxValueBytes, true),
		f("HERMES_SESSION_CHAT_TYPE", ClassIdentity, maxNameBytes, true),
		f("HERMES_SESSION_CHAT_NAME", ClassDisplay, maxDisplayBytes, true),
		f("HERMES_SESSION_THREAD_ID", ClassIdentity, MaxValueBytes, true),
		f("HERMES_SESSION_USER_ID", ClassIdentity, MaxValueBytes, true),
		f("HERMES_SESSION_USER_ID_ALT", ClassIdentity, MaxValueBytes, true),
		userName,
		// Platform-neutral scope (Discord guild, Slack workspace, Matrix
		// server): a scoped reply cannot be delivered without it.
		f("HERMES_SESSION_SCOPE_ID", ClassIdentity, MaxValueBytes, true),
		f("HERMES_SESSION_KEY", ClassIdentity, MaxValueBytes, true),
		f("HERMES_SESSION_ID", ClassIdentity, MaxValueBytes, true),
		// An in-process UI tab or window: meaningless to another machine.
		f("HERMES_UI_SESSION_ID", ClassLocal, MaxValueBytes, true),
		// The triggering message: the reply anchor that keeps a
		// notification in its topic.
		f("HERMES_SESSION_MESSAGE_ID", ClassIdentity, MaxValueBytes, true),
		f("HERMES_SESSION_PROFILE", ClassIdentity, maxNameBytes, true),
		// Who may drive the local browser and over which transport:
		// authority inside this host, never to be asserted by a peer.
		principal,
		f("HERMES_BROWSER_CONTROL_TRANSPORT_FAMILY", ClassLocal, maxNameBytes, true),
		f("HERMES_CRON_SESSION", ClassIdentity, maxNameBytes, true),
		// The parent channel of a thread: a routing anchor.
		f("HERMES_SESSION_PARENT_CHAT_ID", ClassIdentity, MaxValueBytes, true),
		f("HERMES_CRON_AUTO_DELIVER_PLATFORM", ClassIdentity, maxNameBytes, false),
		f("HERMES_CRON_AUTO_DELIVER_CHAT_ID", ClassIdentity, MaxValueBytes, false),
		f("HERMES_CRON_AUTO_DELIVER_THREAD_ID", ClassIdentity, MaxValueBytes, false),
		// A cron job's persisted identity: the job, and the platform and
		// user that created it. Not a live sender session (so outside Bind
		// and Clear), but routing data a job's notifications carry home.
		f("HERMES_CRON_JOB_ID", ClassIdentity, MaxValueBytes, false),
		f("HERMES_CRON_JOB_ORIGIN_USER_ID", ClassIdentity, MaxValueBytes, false),
		f("HERMES_CRON_JOB_ORIGIN_PLATFORM", ClassIdentity, maxNameBytes, false),
	}
	for i := range t {
		t[i].Field = Field(i + 1)
	}
	return append(t,
		Spec{Key: AsyncDeliveryKey, Class: ClassControl, MaxLen: 1, Signed: true, InSession: true},
		Spec{Key: SignatureKey, Class: ClassControl, MaxLen: maxSignatureBytes},
		Spec{Key: CwdKey, Env: CwdEnv, Class: ClassLocal, MaxLen: maxCwdBytes, InSession: true},
	)
}()

// Derived once from table; read-only afterwards.
var (
	specByKey = make(map[string]*Spec, len(table))
	allFields = make([]Field, 0, numFields)
	// remoteFields lists the fields that are baggage members, in Field order.
	remoteFields []Field
	// fieldKeys holds each field's key, indexed by Field-1.
	fieldKeys [numFields]string
)

func init() {
	if err := checkTable(table); err != nil {
		panic("otelsession: " + err.Error())
	}
	for i := range table {
		s := &table[i]
		specByKey[s.Key] = s
		if s.Field == 0 {
			continue
		}
		fieldKeys[s.Field-1] = s.Key
		allFields = append(allFields, s.Field)
		if s.Baggage() {
			remoteFields = append(remoteFields, s.Field)
		}
	}
}

// checkTable refuses, at start-up, a table that could not work: a key
// outside the namespace or not in its canonical spelling, two rows with one
// key or one environment name, a local key that claims a signature, a field
// out of place.
func checkTable(t []Spec) error {
	keys := make(map[string]bool, len(t))
	envs := make(map[string]bool, len(t))
	for i, s := range t {
		switch {
		case !strings.HasPrefix(s.Key, KeyPrefix) || s.Key != strings.ToLower(s.Key) || !isToken(s.Key):
			return fmt.Errorf("key %q is not a lower-case token under %q", s.Key, KeyPrefix)
		case keys[s.Key]:
			return fmt.Errorf("key %q declared twice", s.Key)
		case s.Env != "" && envs[s.Env]:
			return fmt.Errorf("environment name %q declared twice", s.Env)
		case s.Class == ClassLocal && s.Signed:
			return fmt.Errorf("local key %q cannot be signed", s.Key)
		case s.MaxLen <= 0:
			return fmt.Errorf("key %q has no length limit", s.Key)
		case i < numFields && s.Field != Field(i+1), i >= numFields && s.Field != 0:
			return fmt.Errorf("key %q is out of place", s.Key)
		}
		keys[s.Key], envs[s.Env] = true, s.Env != ""
	}
	return nil
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return s != ""
}

// Specs returns the wire-key table: a row for every field, in Field order,
// then the async-delivery capability, the signature and the working
// directory. The caller may modify the returned slice.
func Specs() []Spec { return append([]Spec(nil), table...) }

// SpecOf returns the row of key, which must be in its canonical spelling
// ("session.chat_id"); see [OwnedKey] for every other spelling.
func SpecOf(key string) (Spec, bool) {
	if s := specByKey[key]; s != nil {
		return *s, true
	}
	return Spec{}, false
}

// Fields returns every field, in declaration order. The caller may modify the
// returned slice.
func Fields() []Field {
	return append([]Field(nil), allFields...)
}

// FieldByName returns the field whose legacy environment name is name, such as
// "HERMES_SESSION_CHAT_ID".
func FieldByName(name string) (Field, bool) {
	f := fieldByEnv(name)
	return f, f != 0
}

// FieldByKey returns the field whose key is key, such as "session.chat_id".
func FieldByKey(key string) (Field, bool) {
	if s := specByKey[key]; s != nil && s.Field != 0 {
		return s.Field, true
	}
	return 0, false
}

// Valid reports whether f is one of the declared fields.
func (f Field) Valid() bool { return f > 0 && f < fieldEnd }

// Spec returns the field's row of the wire-key table; the zero Spec for an
// invalid Field.
func (f Field) Spec() Spec {
	if !f.Valid() {
		return Spec{}
	}
	return table[f-1]
}

// Name returns the legacy environment variable name, such as
// "HERMES_SESSION_CHAT_ID", or "" for an invalid Field.
func (f Field) Name() string {
	if !f.Valid() {
		return ""
	}
	return table[f-1].Env
}

// Key returns the field's key, such as "session.chat_id": its baggage member
// key when it is remote, and its attribute key on spans and logs either way.
// It returns "" for an invalid Field.
func (f Field) Key() string {
	if !f.Valid() {
		return ""
	}
	return fieldKeys[f-1]
}

// Class returns the field's class; 0 for an invalid Field.
func (f Field) Class() Class {
	if !f.Valid() {
		return 0
	}
	return table[f-1].Class
}

// Scope reports whether the field is a baggage member (Remote) or stays in the
// process (Local).
func (f Field) Scope() Scope {
	switch {
	case !f.Valid():
		return 0
	case table[f-1].Class == ClassLocal:
		return Local
	}
	return Remote
}

// InSession reports whether [Bind] binds the field and [Clear] clears it. Only
// the cron auto-deliver fields and the cron job's identity are outside the
// session.
func (f Field) InSession() bool { return f.Valid() && table[f-1].InSession }

// String returns the field's key.
func (f Field) String() string {
	if !f.Valid() {
		return "otelsession.Field(invalid)"
	}
	return f.Key()
}
