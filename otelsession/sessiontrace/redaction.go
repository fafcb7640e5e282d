package sessiontrace

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/sessionwire/sessionwire/otelsession"
)

// Action is what a redaction policy does with one field: the wire-key
// table's redaction (otelsession.Spec.Redact) is its default.
type Action = otelsession.Redact

const (
	// Copy puts the value on the span or record as it is.
	Copy = otelsession.RedactCopy
	// Hash puts "hmac:" and the first 16 bytes of HMAC-SHA256(key, value),
	// in hex. Without a key it drops the field.
	Hash = otelsession.RedactHash
	// Drop leaves the field off.
	Drop = otelsession.RedactDrop
)

// Redaction decides, field by field, what reaches spans and logs.
type Redaction struct {
	// Actions overrides the default action for the fields it names. The
	// defaults are the wire-key table's (otelsession.Spec.Redact): Hash for
	// the user name and the browser-control principal, Copy for every other
	// field.
	Actions map[otelsession.Field]Action
	// HashKey keys Hash. Keep it secret and stable: rotating it breaks
	// correlation with older traces. Without a key, Hash means Drop.
	HashKey []byte
	// SpanFields are the fields [SpanProcessor] records on every span; nil
	// is [DefaultSpanFields]. Every attribute costs the SDK time on every
	// span (it stores, de-duplicates and snapshots each; the README's span
	// rows say how much), so spans carry the routing identity and the rest
	// is opt-in: otelsession.Fields() records every field, as logs do. Log
	// handlers and processors ignore it.
	SpanFields []otelsession.Field
	// ConversationID records the session key a second time, as
	// gen_ai.conversation.id ([ConversationIDKey]), on spans and log
	// records: for tools that group by the OpenTelemetry GenAI convention's
	// conversation attribute and know nothing of session.*. Off by default:
	// the convention puts that attribute on GenAI operations (a model call,
	// an agent turn), session.key already holds the value, and the copy
	// costs every span one more attribute. `sessionctl trace` groups by
	// either.
	ConversationID bool
}

// DefaultSpanFields returns the fields a span carries by default: the
// routing identity that finds one message's trace and tells where its reply
// must go (platform, workspace scope, chat, thread, message anchor), the
// conversation it belongs to (the session key, by which `sessionctl trace`
// groups a conversation's traces) and the user id, hashed (see
// [SpanProcessor]).
func DefaultSpanFields() []otelsession.Field {
	return []otelsession.Field{
		otelsession.FieldPlatform, otelsession.FieldScopeID, otelsession.FieldChatID, otelsession.FieldThreadID,
		otelsession.FieldMessageID, otelsession.FieldSessionKey, otelsession.FieldUserID,
	}
}

// hashPrefix marks a hashed value.
const hashPrefix = "hmac:"

// maxCachedHashes bounds the memo of hashed values; it is emptied when full.
const maxCachedHashes = 4096

// redactor is a compiled Redaction, safe for concurrent use.
type redactor struct {
	action [otelsession.NumFields + 1]Action // indexed by Field
	key    []byte
	// conversation is Redaction.ConversationID.
	conversation bool
	mu           sync.RWMutex
	hashes       map[string]string // value -> hashed form; an HMAC per span is too slow
}

func newRedactor(r Redaction, defaults map[otelsession.Field]Action) *redactor {
	c := &redactor{key: append([]byte(nil), r.HashKey...), conversation: r.ConversationID, hashes: make(map[string]string)}
	for _, f := range otelsession.Fields() {
		c.action[f] = f.Spec().Redact
	}
	for f, a := range defaults {
		c.action[f] = a
	}
	for f, a := range r.Actions {
		if f.Valid() {
			c.action[f] = a
		}
	}
	if len(c.key) == 0 {
		for i, a := range c.action {
			if a == Hash {
				c.action[i] = Drop
			}
		}
	}
	return c
}

// apply returns what to record for field f holding v (Set), and false when
// the field is dropped.
func (c *redactor) apply(f otelsession.Field, v string) (string, bool) {
	switch c.action[f] {
	case Copy:
		return v, true
	case Hash:
		return c.hash(v), true
	}
	return "", false
}

func (c *redactor) hash(v string) string {
	c.mu.RLock()
	h, ok := c.hashes[v]
	c.mu.RUnlock()
	if ok {
		return h
	}
	mac := hmac.New(sha256.New, c.key)
	mac.Write([]byte(v))
	h = hashPrefix + hex.EncodeToString(mac.Sum(nil)[:16])
	c.mu.Lock()
	if len(c.hashes) >= maxCachedHashes {
		clear(c.hashes)
	}
	c.hashes[v] = h
	c.mu.Unlock()
	return h
}

// visitFields is visit over fields only.
func (c *redactor) visitFields(ctx context.Context, fields []otelsession.Field, fn func(f otelsession.Field, v string)) {
	otelsession.RangeFields(ctx, fields, c.recorder(fn))
}

// visit calls fn with every field of ctx's session that is to be recorded and
// the form to record: the redacted value of a Set field, "" for a Cleared
// one. Unset and dropped fields are skipped.
func (c *redactor) visit(ctx context.Context, fn func(f otelsession.Field, v string)) {
	otelsession.Range(ctx, c.recorder(fn))
}

// recorder is the range function of visit and visitFields: it calls fn
// with what is to be recorded of each field, as visit says.
func (c *redactor) recorder(fn func(f otelsession.Field, v string)) func(otelsession.Field, string, otelsession.State) bool {
	return func(f otelsession.Field, v string, st otelsession.State) bool {
		switch st {
		case otelsession.Cleared:
			if c.action[f] != Drop {
				fn(f, "")
			}
		case otelsession.Set:
			if out, ok := c.apply(f, v); ok {
				fn(f, out)
			}
		}
		return true
	}
}
