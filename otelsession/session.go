package otelsession

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/baggage"
)

// The W3C limits for the whole baggage, all members and all `baggage`
// headers together (https://www.w3.org/TR/baggage/#limits), which the session
// shares with the application's own baggage.
const (
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

// Validate reports every reason [Bind] would refuse s: an identity or local
// value that [ValidateValue] refuses (a control character, bytes that are not
// UTF-8, longer than its key's limit), an unknown cron marker, or a session
// whose encoded members exceed MaxBaggageBytes. A display value that Bind
// would cut or drop is not a refusal and is not reported here. The error
// wraps ErrInvalidValue, ErrValueTooLong or ErrSessionTooLarge and names the
// fields (never their values, which may be personal data). Call it at an
// ingress to refuse bad input with a clear message.
func (s Session) Validate() error {
	e, errs, _ := bindEdit(s)
	if len(errs) == 0 {
		if _, _, _, err := e.baggage(baggage.Baggage{}); errors.Is(err, ErrSessionTooLarge) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("otelsession: invalid session: %w", err)
	}
	return nil
}

// bindEdit turns s into the edit Bind applies, with every reason to refuse it
// (errs) and every display value it cut or dropped (notes).
func bindEdit(s Session) (e edit, errs []error, notes []displayNote) {
	vals, st := s.values()
	e.whole = true
	if s.Cron > CronOn {
		errs = append(errs, fmt.Errorf("%s: cron marker %d: %w", FieldCronSession.Key(), s.Cron, ErrInvalidValue))
	}
	for i := range numFields {
		switch st[i] {
		case Set:
			v, err := ValidateValue(table[i], vals[i])
			switch {
			case err == nil:
			case errors.Is(err, ErrInvalidValue):
				errs = append(errs, err)
			default:
				notes = append(notes, displayNote{table[i].Key, err})
			}
			e.op[i], e.val[i] = opSet, v
		case Cleared:
			e.op[i] = opSet
		default:
			if table[i].InSession {
				e.op[i] = opUnset
			}
		}
	}
	if _, err := ValidateValue(cwdSpec(), s.Cwd); err != nil {
		errs = append(errs, err)
	}
	e.cwd, e.cwdVal = opSet, s.Cwd
	e.async = opUnset
	if s.Stateless {
		e.async = opSet
	}
	return e, errs, notes
}

// cwdSpec is the working directory's row.
func cwdSpec() Spec { return *specByKey[CwdKey] }
