package otelsession

import "strings"

// Field is one session field: a legacy environment name, a key, and a scope.
// The zero Field is not a field; the exported Field values below are the whole
// schema.
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

// Scope says where a field may travel.
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

// schema is the one declaration every behaviour is driven by: the order is the
// Field order, and session marks the fields Bind binds and Clear clears.
var schema = [numFields]struct {
	name    string
	scope   Scope
	session bool
}{
	{"HERMES_SESSION_PLATFORM", Remote, true},
	{"HERMES_SESSION_SOURCE", Remote, true},
	{"HERMES_SESSION_CHAT_ID", Remote, true},
	{"HERMES_SESSION_CHAT_TYPE", Remote, true},
	{"HERMES_SESSION_CHAT_NAME", Remote, true},
	{"HERMES_SESSION_THREAD_ID", Remote, true},
	{"HERMES_SESSION_USER_ID", Remote, true},
	{"HERMES_SESSION_USER_ID_ALT", Remote, true},
	{"HERMES_SESSION_USER_NAME", Remote, true},
	// Platform-neutral scope (Discord guild, Slack workspace, Matrix server):
	// a scoped reply cannot be delivered without it.
	{"HERMES_SESSION_SCOPE_ID", Remote, true},
	{"HERMES_SESSION_KEY", Remote, true},
	{"HERMES_SESSION_ID", Remote, true},
	// An in-process UI tab or window: meaningless to another machine.
	{"HERMES_UI_SESSION_ID", Local, true},
	// The triggering message: the reply anchor that keeps a notification in
	// its topic.
	{"HERMES_SESSION_MESSAGE_ID", Remote, true},
	{"HERMES_SESSION_PROFILE", Remote, true},
	// Who may drive the local browser and over which transport: authority
	// inside this host, never to be asserted by a remote peer.
	{"HERMES_BROWSER_CONTROL_PRINCIPAL", Local, true},
	{"HERMES_BROWSER_CONTROL_TRANSPORT_FAMILY", Local, true},
	{"HERMES_CRON_SESSION", Remote, true},
	// The parent channel of a thread: a routing anchor.
	{"HERMES_SESSION_PARENT_CHAT_ID", Remote, true},
	{"HERMES_CRON_AUTO_DELIVER_PLATFORM", Remote, false},
	{"HERMES_CRON_AUTO_DELIVER_CHAT_ID", Remote, false},
	{"HERMES_CRON_AUTO_DELIVER_THREAD_ID", Remote, false},
	// A cron job's persisted identity: the job, and the platform and user
	// that created it. Not a live sender session (so outside Bind and
	// Clear), but routing data a job's notifications carry home.
	{"HERMES_CRON_JOB_ID", Remote, false},
	{"HERMES_CRON_JOB_ORIGIN_USER_ID", Remote, false},
	{"HERMES_CRON_JOB_ORIGIN_PLATFORM", Remote, false},
}

// KeyPrefix starts every sessionwire key, in baggage and in attributes.
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
)

// Derived once from schema; read-only afterwards.
var (
	fieldKeys   [numFields]string
	fieldByName = make(map[string]Field, numFields)
	fieldByKey  = make(map[string]Field, numFields)
	allFields   = make([]Field, 0, numFields)
	// remoteFields lists the remote fields, in Field order.
	remoteFields []Field
)

func init() {
	for i, d := range schema {
		f := Field(i + 1)
		key := strings.ToLower(strings.TrimPrefix(d.name, "HERMES_"))
		key = KeyPrefix + strings.TrimPrefix(key, "session_")
		fieldKeys[i] = key
		fieldByName[d.name] = f
		fieldByKey[key] = f
		allFields = append(allFields, f)
		if d.scope == Remote {
			remoteFields = append(remoteFields, f)
		}
	}
}

// Fields returns every field, in declaration order. The caller may modify the
// returned slice.
func Fields() []Field {
	return append([]Field(nil), allFields...)
}

// FieldByName returns the field whose legacy environment name is name, such as
// "HERMES_SESSION_CHAT_ID".
func FieldByName(name string) (Field, bool) {
	f, ok := fieldByName[name]
	return f, ok
}

// FieldByKey returns the field whose key is key, such as "session.chat_id".
func FieldByKey(key string) (Field, bool) {
	f, ok := fieldByKey[key]
	return f, ok
}

// Valid reports whether f is one of the declared fields.
func (f Field) Valid() bool { return f > 0 && f < fieldEnd }

// Name returns the legacy environment variable name, such as
// "HERMES_SESSION_CHAT_ID", or "" for an invalid Field.
func (f Field) Name() string {
	if !f.Valid() {
		return ""
	}
	return schema[f-1].name
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

// Scope reports whether the field is a baggage member (Remote) or stays in the
// process (Local).
func (f Field) Scope() Scope {
	if !f.Valid() {
		return 0
	}
	return schema[f-1].scope
}

// InSession reports whether [Bind] binds the field and [Clear] clears it. Only
// the cron auto-deliver fields and the cron job's identity are outside the
// session.
func (f Field) InSession() bool { return f.Valid() && schema[f-1].session }

// String returns the field's key.
func (f Field) String() string {
	if !f.Valid() {
		return "otelsession.Field(invalid)"
	}
	return f.Key()
}

// isOwnedKey reports whether a baggage member key belongs to sessionwire: a
// field key (local ones too, which must never be in baggage) or the async
// delivery key. Owned members are replaced or removed by Bind, Clear and
// Reset; every other member passes through untouched.
func isOwnedKey(key string) bool {
	if len(key) <= len(KeyPrefix) || key[:len(KeyPrefix)] != KeyPrefix {
		return false
	}
	if key == AsyncDeliveryKey || key == CwdKey || key == SignatureKey {
		return true
	}
	_, ok := fieldByKey[key]
	return ok
}
