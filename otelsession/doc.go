// Package otelsession keeps a conversation's session identity (platform, chat,
// thread, user, scope, message anchor, …) in a context.Context, as
// OpenTelemetry baggage members, so that concurrent messages never see each
// other's session and any stock OTel propagator carries it to the next
// process.
//
// # The model
//
// Every field is in one of three states in a context ([State]):
//
//   - Unset: never bound here. [Getenv] falls back to the environment (see
//     package fallback), which keeps single-session programs working.
//   - Cleared: bound empty. [Getenv] returns "" and never falls back, so a
//     stale process-wide value stays masked.
//   - Set: bound to a value.
//
// [Bind] binds a whole [Session] when a message arrives, [Clear] marks it
// Cleared when the handler ends, and [Reset] makes every field Unset where a
// new unit of work starts from an inherited context. [Lookup] reads one field
// with its state; [Getenv] is a drop-in for os.Getenv by legacy name
// (HERMES_SESSION_THREAD_ID, …). Like the context package, nothing is ever
// modified: every writer returns a derived context and the parent keeps what
// it had.
//
// # The schema
//
// One table, the wire-key table ([Specs], a [Spec] per row), declares every
// key of the session namespace: its legacy environment name ([Field.Name]),
// its key ([Field.Key]: "session." and the name lower-cased without HERMES_
// and a leading SESSION_, such as session.chat_id, session.key, session.id),
// its [Class] (identity, display, local, control), the limit of its value,
// whether a signature covers it and its default redaction on spans and logs.
// Binding, the inbound and outbound policies of package propagation,
// signing, redaction, the child-process environment and the operator tools
// all read it, and validate values with the one rule, [ValidateValue]: a
// value Bind accepts is accepted by every receiving edge, and the reverse.
// The namespace is owned ([OwnedKey]): a member whose key decodes or
// case-folds into session. but is not a row in its canonical spelling is
// dropped by the writers here, refused inbound and stripped outbound.
// Remote fields (every class but local) are baggage members.
// Local fields (the UI session id and the two browser-control fields) and the
// logical working directory ([Cwd]) never leave the process over the network:
// any OTel propagator forwards every baggage member it sees, so they are kept
// in the context beside the baggage instead. Child processes, being in the
// same trust domain, receive them through their environment.
//
// The rows, as [Specs] returns them (max is in bytes; sig: covered by a
// signature; redaction: the default on spans and logs):
//
//	key                                        environment variable                      class     max  sig  redaction
//	session.platform                           HERMES_SESSION_PLATFORM                   identity   64  yes  copy
//	session.source                             HERMES_SESSION_SOURCE                     identity   64  yes  copy
//	session.chat_id                            HERMES_SESSION_CHAT_ID                    identity  512  yes  copy
//	session.chat_type                          HERMES_SESSION_CHAT_TYPE                  identity   64  yes  copy
//	session.chat_name                          HERMES_SESSION_CHAT_NAME                  display   256  yes  copy
//	session.thread_id                          HERMES_SESSION_THREAD_ID                  identity  512  yes  copy
//	session.user_id                            HERMES_SESSION_USER_ID                    identity  512  yes  copy
//	session.user_id_alt                        HERMES_SESSION_USER_ID_ALT                identity  512  yes  copy
//	session.user_name                          HERMES_SESSION_USER_NAME                  display   256  yes  hash
//	session.scope_id                           HERMES_SESSION_SCOPE_ID                   identity  512  yes  copy
//	session.key                                HERMES_SESSION_KEY                        identity  512  yes  copy
//	session.id                                 HERMES_SESSION_ID                         identity  512  yes  copy
//	session.ui_session_id                      HERMES_UI_SESSION_ID                      local     512  no   copy
//	session.message_id                         HERMES_SESSION_MESSAGE_ID                 identity  512  yes  copy
//	session.profile                            HERMES_SESSION_PROFILE                    identity   64  yes  copy
//	session.browser_control_principal          HERMES_BROWSER_CONTROL_PRINCIPAL          local     512  no   hash
//	session.browser_control_transport_family   HERMES_BROWSER_CONTROL_TRANSPORT_FAMILY   local      64  no   copy
//	session.cron_session                       HERMES_CRON_SESSION                       identity   64  yes  copy
//	session.parent_chat_id                     HERMES_SESSION_PARENT_CHAT_ID             identity  512  yes  copy
//	session.cron_auto_deliver_platform         HERMES_CRON_AUTO_DELIVER_PLATFORM         identity   64  yes  copy
//	session.cron_auto_deliver_chat_id          HERMES_CRON_AUTO_DELIVER_CHAT_ID          identity  512  yes  copy
//	session.cron_auto_deliver_thread_id        HERMES_CRON_AUTO_DELIVER_THREAD_ID        identity  512  yes  copy
//	session.cron_job_id                        HERMES_CRON_JOB_ID                        identity  512  yes  copy
//	session.cron_job_origin_user_id            HERMES_CRON_JOB_ORIGIN_USER_ID            identity  512  yes  copy
//	session.cron_job_origin_platform           HERMES_CRON_JOB_ORIGIN_PLATFORM           identity   64  yes  copy
//	session.async_delivery                     -                                         control     1  yes  copy
//	session.sig                                -                                         control   128  no   copy
//	session.cwd                                SESSIONWIRE_CWD                           local    4096  no   copy
//
// Six fields are not the session's: [Bind] leaves them, [Clear] leaves them,
// [Reset] unsets them. They belong to the cron job a run is for, and a
// scheduler binds them per job on the context the run starts from: the
// auto-deliver target (HERMES_CRON_AUTO_DELIVER_*, with [With]) and the
// identity the job was stored with (HERMES_CRON_JOB_ID and its origin's
// HERMES_CRON_JOB_ORIGIN_USER_ID and HERMES_CRON_JOB_ORIGIN_PLATFORM, with
// [WithCronJob], which binds all three or, given CronJob{}, clears all
// three when the job ends). The original keeps them apart from the session
// for the same reason: a job's stored origin authorizes the job, but nobody
// is chatting. They are remote, so a job's child processes and
// notifications carry them like the session's fields.
//
// A delegated child ([WithDelegatedChild]) is marked in its context and
// bound to its own session id; given no id, it keeps its parent's.
//
// # On the wire
//
// A Set field is the member key=value, the value percent-encoded by the OTel
// baggage package. A Cleared field is the member key=%00: one NUL byte.
// An empty value (key=) would be the obvious choice, but some OTel SDKs (the
// JavaScript one among them) drop empty-valued members when they extract
// baggage, which would turn Cleared into Unset one hop later and unmask a stale
// environment value there. NUL cannot be a real value: no environment variable
// can hold it, and Bind refuses values that contain it. An empty member
// written by other code still reads as Cleared. An Unset field has no member.
// A stateless channel adds the member session.async_delivery=0.
//
// The context's baggage is the truth for remote fields: baggage built by any
// code (a stock propagator, baggage.ContextWithBaggage) reads back through
// Lookup. A baggage that a writer of this package built, or that an inbound
// policy of package propagation accepted, is read from the record its
// builder left in the context beside it, once the record is known to
// describe the very map the context holds: a baggage never changes, so its
// record cannot go stale, and any other baggage (replaced by other code,
// even with the same members) is looked up member by member. A fixed table
// of the addresses of the maps a record was made for (4,096 slots, 32 KiB,
// nothing kept alive) spares the read of such a baggage the walk of the
// context looking for a record; a map whose slot another took is read
// member by member too, with the same result. Members
// outside the session namespace pass through Bind, Clear and Reset
// untouched, and the session's own members are written in one pass (one
// baggage.New, never one map copy per field).
//
// What is cached is what Bind writes: a small bounded cache ([BindCache],
// [SetBindCacheSize]) hands the baggage and local state built for a session
// to the next Bind of the same session (its message id may differ: that one
// member is replaced with one map copy; up to two members of the
// application's in the context are added the same way). Baggage values are
// immutable, so the sharing is safe; only sessions Bind accepts whole are
// kept. Beside the
// local state, a writer also records the baggage map it built from values it
// checked, so that an outbound policy ([propagation.Outbound]) need not read
// them back while the context's baggage is still that map, and writes its
// W3C line in one string instead of having OpenTelemetry encode every
// member: the session's from the record, the application's members the
// writer kept beside it looked up by the keys it noted (the same members,
// each escaped as OpenTelemetry escapes it).
//
// # Limits and refused values
//
// The session shares the W3C limits (64 members, 8192 bytes) with the
// application's own baggage. A full session is 16 members and about 500
// bytes. Writers never fail and never bind part of a session:
//
//   - an identity or local value that [ValidateValue] refuses (a control
//     character, bytes that are not UTF-8 or U+FFFD, longer than its row's
//     limit) is refused. Bind then binds the whole session Cleared (a
//     refused message has no identity, rather than half of one); With binds
//     that one field Cleared;
//   - a display value (chat or user name) too long is cut at a UTF-8
//     boundary, and one that holds an unusable character is bound Cleared;
//     the rest of the session is bound as given, so a long chat name never
//     costs a message its thread. Each kind is reported once per field
//     (wrapping [ErrValueTruncated] or [ErrValueDropped]) and counted in the
//     sessionwire.session.values metric;
//   - if the session's own members do not fit 8192 bytes, Bind likewise binds
//     it Cleared;
//   - if the application's baggage leaves too little room, members that are
//     not session fields are dropped, largest first, until the whole session
//     fits.
//
// Each case is reported to otel.Handle with an error wrapping
// [ErrInvalidValue], [ErrValueTooLong], [ErrSessionTooLarge] or
// [ErrForeignMembersDropped]; errors name fields, never values. To refuse bad
// input before binding it, call [Session.Validate].
//
// [propagation.Outbound]: https://pkg.go.dev/github.com/sessionwire/sessionwire/propagation#Outbound
package otelsession
