package otelsession

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/baggage"
)

// Limits of a session, beside the W3C baggage limits it shares with the
// application's own baggage (https://www.w3.org/TR/baggage/#limits).
const (
	// MaxValueBytes bounds one field's value, in bytes before percent-encoding.
	MaxValueBytes = 512
	// MaxBaggageMembers and MaxBaggageBytes are the W3C limits for the whole
	// baggage, all members and all `baggage` headers together.
	MaxBaggageMembers = 64
	MaxBaggageBytes   = 8192
)

// CronMarker is the tri-state cron marker of a session.
type CronMarker uint8

const (
	// CronUnset leaves HERMES_CRON_SESSION Unset, so it falls back to the
	// process environment (command-line tools and tests).
	CronUnset CronMarker = iota
	// CronOff marks a session as not a cron run: Cleared, masking a value
	// leaked into the environment.
	CronOff
	// CronOn marks a session as a cron run: Set to "1".
	CronOn
)

// Session is a conversation's identity, as bound by [Bind]. Its zero value is
// useful: it binds every field as Cleared, leaves the cron marker Unset and
// supports async delivery.
type Session struct {
	Platform                      string // "telegram", "discord", "cli", …
	Source                        string // the surface for hosts that bind no platform
	ChatID                        string
	ChatType                      string
	ChatName                      string
	ThreadID                      string
	UserID                        string
	UserIDAlt                     string
	UserName                      string
	ScopeID                       string // guild / workspace / server
	SessionKey                    string
	SessionID                     string
	UISessionID                   string // local: never leaves the process
	MessageID                     string // the reply anchor
	Profile                       string
	BrowserControlPrincipal       string // local
	BrowserControlTransportFamily string // local
	ParentChatID                  string // the parent channel of a thread
	Cron                          CronMarker
	// Cwd is the session's logical working directory (local).
	Cwd string
	// Stateless declares a channel that cannot receive a completion after
	// the turn ends (a stateless API request): async delivery is opt-out.
	Stateless bool
}

// values returns the session's field values indexed by Field-1, with the
// states Bind gives them. Cron auto-deliver fields are not part of a Session.
func (s *Session) values() (vals [numFields]string, st [numFields]State) {
	set := func(f Field, v string) {
		vals[f-1] = v
		st[f-1] = Cleared
		if v != "" {
			st[f-1] = Set
		}
	}
	set(FieldPlatform, s.Platform)
	set(FieldSource, s.Source)
	set(FieldChatID, s.ChatID)
	set(FieldChatType, s.ChatType)
	set(FieldChatName, s.ChatName)
	set(FieldThreadID, s.ThreadID)
	set(FieldUserID, s.UserID)
	set(FieldUserIDAlt, s.UserIDAlt)
	set(FieldUserName, s.UserName)
	set(FieldScopeID, s.ScopeID)
	set(FieldSessionKey, s.SessionKey)
	set(FieldSessionID, s.SessionID)
	set(FieldUISessionID, s.UISessionID)
	set(FieldMessageID, s.MessageID)
	set(FieldProfile, s.Profile)
	set(FieldBrowserControlPrincipal, s.BrowserControlPrincipal)
	set(FieldBrowserControlTransportFamily, s.BrowserControlTransportFamily)
	set(FieldParentChatID, s.ParentChatID)
	switch s.Cron {
	case CronOff:
		set(FieldCronSession, "")
	case CronOn:
		set(FieldCronSession, "1")
	}
	return vals, st
}

// Validate reports every reason [Bind] would refuse s: a value that is not
// valid UTF-8, holds a NUL byte or is longer than MaxValueBytes, an unknown
// cron marker, or a session whose encoded members exceed MaxBaggageBytes. The
// error wraps ErrInvalidValue, ErrValueTooLong or ErrSessionTooLarge and
// names the fields (never their values, which may be personal data).
// Call it at an ingress to refuse bad input with a clear message.
func (s Session) Validate() error {
	e, errs := bindEdit(s)
	if len(errs) == 0 {
		if _, err := e.baggage(baggage.Baggage{}); errors.Is(err, ErrSessionTooLarge) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("otelsession: invalid session: %w", err)
	}
	return nil
}

// bindEdit turns s into the edit Bind applies, with every reason to refuse it.
func bindEdit(s Session) (e edit, errs []error) {
	vals, st := s.values()
	e.whole = true
	if s.Cron > CronOn {
		errs = append(errs, fmt.Errorf("%s: cron marker %d: %w", FieldCronSession.Key(), s.Cron, ErrInvalidValue))
	}
	for i := range numFields {
		switch st[i] {
		case Set:
			if err := checkValue(fieldKeys[i], vals[i]); err != nil {
				errs = append(errs, err)
			}
			e.op[i], e.val[i] = opSet, vals[i]
		case Cleared:
			e.op[i] = opSet
		default:
			if schema[i].session {
				e.op[i] = opUnset
			}
		}
	}
	if err := checkValue(CwdKey, s.Cwd); err != nil {
		errs = append(errs, err)
	}
	e.cwd, e.cwdVal = opSet, s.Cwd
	e.async = opUnset
	if s.Stateless {
		e.async = opSet
	}
	return e, errs
}

// checkValue validates one value bound under key.
func checkValue(key, v string) error {
	switch {
	case len(v) > MaxValueBytes:
		return fmt.Errorf("%s: %d bytes, limit %d: %w", key, len(v), MaxValueBytes, ErrValueTooLong)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s: not valid UTF-8: %w", key, ErrInvalidValue)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%s: holds a NUL byte: %w", key, ErrInvalidValue)
	}
	return nil
}
