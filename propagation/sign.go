package propagation

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
)

// Errors of signing and verification. A [Verifier] used by an [Inbound]
// policy wraps the last three into the error [Inbound.Extract] returns.
var (
	// ErrSignatureConfig: a key or option given to NewSigner or NewVerifier
	// is unusable (a key id that is not 1 to 32 letters, digits, "-" or "_";
	// a secret shorter than MinSecretBytes; two keys with one id; no key; a
	// verifier's maximum age that is not positive, or a negative maximum
	// skew).
	ErrSignatureConfig = errors.New("invalid session signature configuration")
	// ErrSignatureNoRoom: the signature member does not fit beside the
	// baggage within the W3C limits (64 members, 8192 bytes).
	ErrSignatureNoRoom = errors.New("no room for the session signature within the W3C baggage limits")
	// ErrBadSignature: the session.sig member is malformed, or its MAC does
	// not match the session, key id, issue time and message it claims: a
	// member was changed, added or removed, or the signature was moved to
	// another message.
	ErrBadSignature = errors.New("session signature does not verify")
	// ErrSignatureExpired: the signature verifies but its issue time is
	// outside the accepted window: older than the maximum age, or further in
	// the future than the allowed clock skew.
	ErrSignatureExpired = errors.New("session signature outside its validity window")
	// ErrUnknownKey: the signature names a key id the verifier does not hold
	// (never known, or retired by a rotation).
	ErrUnknownKey = errors.New("session signature made with a key that is not a verify key")
)

// Limits and defaults of session signatures.
const (
	// MinSecretBytes is the shortest secret accepted: HMAC-SHA256 is as
	// strong as its key up to the 32-byte output, and a shorter secret is
	// most likely a password, not a random key.
	MinSecretBytes = 32
	// MaxKeyIDBytes bounds a key id, which travels in every signature.
	MaxKeyIDBytes = 32
	// DefaultMaxAge is how old a signature may be when it is verified. It
	// bounds how long a captured session can be replayed where nothing binds
	// it to a message (HTTP, child processes), so it is short; raise it to
	// the longest time a message may wait in a queue before it is consumed.
	DefaultMaxAge = 5 * time.Minute
	// DefaultMaxSkew is how far in the future an issue time may be, for
	// clocks that disagree a little.
	DefaultMaxSkew = 30 * time.Second
)

// signatureVersion starts every signature value; macDomain starts every MAC
// input, so that no other use of the same key can produce a valid signature.
const (
	signatureVersion = "v1"
	macDomain        = "sessionwire session.sig v1\x00"
	macBytes         = sha256.Size
	macText          = 43 // base64url without padding of 32 bytes
	maxTimeDigits    = 12 // Unix seconds up to year 33658
	maxSignatureLen  = len(signatureVersion) + 1 + MaxKeyIDBytes + 1 + maxTimeDigits + 1 + macText
)

var macEncoding = base64.RawURLEncoding.Strict()

// Key is one HMAC-SHA256 key: its id, which travels in every signature so
// that a verifier knows which of its keys to use, and its secret, which
// never leaves the process.
type Key struct {
	// ID names the key in signatures: 1 to MaxKeyIDBytes letters, digits, "-"
	// or "_", such as "2026-12". It is not secret.
	ID string
	// Secret is at least MinSecretBytes random bytes (crypto/rand), shared by
	// the signing service and every verifying one. NewSigner and NewVerifier
	// copy it.
	Secret []byte
}

func (k Key) check() error {
	if len(k.ID) == 0 || len(k.ID) > MaxKeyIDBytes {
		return fmt.Errorf("key id of %d bytes, want 1 to %d: %w", len(k.ID), MaxKeyIDBytes, ErrSignatureConfig)
	}
	if !validKeyID(k.ID) {
		return fmt.Errorf("key id %q: only letters, digits, \"-\" and \"_\": %w", k.ID, ErrSignatureConfig)
	}
	if len(k.Secret) < MinSecretBytes {
		return fmt.Errorf("key %q: secret of %d bytes, want at least %d: %w", k.ID, len(k.Secret), MinSecretBytes, ErrSignatureConfig)
	}
	return nil
}

func validKeyID(id string) bool {
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// SignatureOption configures a [Signer] or a [Verifier].
type SignatureOption func(*signatureConfig)

type signatureConfig struct {
	now             func() time.Time
	maxAge, maxSkew time.Duration
}

// WithClock sets the clock that gives a signature its issue time and that a
// verifier judges it by. The default is time.Now; tests pass a fixed clock.
func WithClock(now func() time.Time) SignatureOption {
	return func(c *signatureConfig) { c.now = now }
}

// WithMaxAge sets how old a signature may be, [DefaultMaxAge] by default. A
// Signer ignores it.
func WithMaxAge(d time.Duration) SignatureOption {
	return func(c *signatureConfig) { c.maxAge = d }
}

// WithMaxSkew sets how far in the future an issue time may be,
// [DefaultMaxSkew] by default; 0 accepts none. A Signer ignores it.
func WithMaxSkew(d time.Duration) SignatureOption {
	return func(c *signatureConfig) { c.maxSkew = d }
}

// applySignatureOptions is the defaults with opts applied, unchecked: a
// Signer takes its clock from it, and a Verifier checks its window too
// (newSignatureConfig).
func applySignatureOptions(opts []SignatureOption) signatureConfig {
	c := signatureConfig{maxAge: DefaultMaxAge, maxSkew: DefaultMaxSkew}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

func newSignatureConfig(opts []SignatureOption) (signatureConfig, error) {
	c := applySignatureOptions(opts)
	if c.maxAge <= 0 || c.maxSkew < 0 {
		return c, fmt.Errorf("window (max age %v, max skew %v): the age must be positive, the skew 0 or more: %w", c.maxAge, c.maxSkew, ErrSignatureConfig)
	}
	return c, nil
}

// Signer signs the session of a context with one key. It is safe for
// concurrent use. A gateway holds one; the services that verify hold a
// [Verifier] with the same key among theirs.
type Signer struct {
	key *macKey
	now func() time.Time
}

// NewSigner returns a Signer that signs with key. Of the options only
// [WithClock] applies.
func NewSigner(key Key, opts ...SignatureOption) (*Signer, error) {
	if err := key.check(); err != nil {
		return nil, fmt.Errorf("new session signer: %w", err)
	}
	// Only the clock applies: the window options are the verifier's.
	return &Signer{key: newMacKey(key), now: applySignatureOptions(opts).now}, nil
}

// KeyID returns the id of the signing key.
func (s *Signer) KeyID() string { return s.key.id }

// Sign returns a copy of ctx whose baggage carries a signature over its
// session, bound to no message: the session.sig member, replacing any
// earlier one. Call it last, after otelsession.Bind and any other write,
// since every otelsession write to the remote session removes the signature
// (a changed session is no longer the one that was signed). Use it where the transport has no
// message id (HTTP, a child process's environment); see [Signer.SignFor].
//
// The signature covers the session's remote members as they are in the
// baggage (every remote field key and session.async_delivery, present or
// absent, Cleared ones as Cleared), the key id and the issue time. Members
// that are not session fields are not covered and may change freely on the
// way. An error (the signature does not fit the W3C limits) returns ctx
// without any signature.
func (s *Signer) Sign(ctx context.Context) (context.Context, error) {
	return s.SignFor(ctx, "")
}

// SignFor is [Signer.Sign] bound to a message id: the signature then
// verifies only where the receiving side binds exactly that string
// ([Peer.MessageID]), so it cannot be moved onto another message. The
// NATS, Kafka and AMQP edges bind their transport's name, the destination
// (subject; topic; exchange and routing key) and the message's id when it
// has one ([Dest.MessageID]), never "": a signature made for one of their
// messages verifies on no other destination or transport.
func (s *Signer) SignFor(ctx context.Context, messageID string) (context.Context, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	b := baggage.FromContext(ctx)
	var vals signedValues
	sig, err := s.signature(b, messageID, &vals)
	if err != nil {
		return withoutSignature(ctx), fmt.Errorf("sign session: %w", err)
	}
	m, err := baggage.NewMemberRaw(otelsession.SignatureKey, sig)
	if err != nil { // cannot happen: the key is a constant token, the value base64url
		return withoutSignature(ctx), fmt.Errorf("sign session: %w", err)
	}
	_, checked := sessionstate.Checked(ctx, b)
	if err := fitsWith(b, m, &vals, checked); err != nil {
		return withoutSignature(ctx), fmt.Errorf("sign session: %w", err)
	}
	nb, err := b.SetMember(m)
	if err != nil {
		return withoutSignature(ctx), fmt.Errorf("sign session: %w", err)
	}
	return baggage.ContextWithBaggage(ctx, nb), nil
}

// signature returns the session.sig value over the session of b, bound to
// messageID and issued now, and leaves in vals the members it covers. It
// does not check the W3C limits: its callers measure what they send.
func (s *Signer) signature(b baggage.Baggage, messageID string, vals *signedValues) (string, error) {
	var sum [macBytes]byte
	ts, err := s.mac(b, messageID, vals, &sum)
	if err != nil {
		return "", err
	}
	return formatSignature(s.key.id, ts, &sum), nil
}

// mac leaves in sum the MAC over the session of b, bound to messageID and
// issued now, and in vals the members it covers; it returns the issue time.
func (s *Signer) mac(b baggage.Baggage, messageID string, vals *signedValues, sum *[macBytes]byte) (int64, error) {
	ts := s.now().Unix()
	if ts < 0 {
		return 0, fmt.Errorf("the clock reads before 1970: %w", ErrSignatureConfig)
	}
	vals.gather(b)
	s.key.sum(ts, messageID, vals, sum)
	return ts, nil
}

// fitsWith reports whether b with sig (replacing b's own) is within the
// W3C limits, measuring exactly only when a cheap upper bound says it may
// not be. vals are b's signed members (gather). checked says b is one an
// otelsession writer built: no signature, and members without properties.
func fitsWith(b baggage.Baggage, sig baggage.Member, vals *signedValues, checked bool) error {
	members := b.Len()
	if checked || b.Member(otelsession.SignatureKey).Key() == "" {
		members++
	}
	if members > otelsession.MaxBaggageMembers {
		return fmt.Errorf("%d members, limit %d: %w", members, otelsession.MaxBaggageMembers, ErrSignatureNoRoom)
	}
	bound := len(sig.String())
	if n, size := vals.encodedBound(); checked && n == b.Len() {
		// Nothing but the session: its values are all there is to measure,
		// without copying every member out of b.
		bound += size
	} else {
		for _, m := range b.Members() {
			if m.Key() == otelsession.SignatureKey {
				continue
			}
			bound += 1 + len(m.Key()) + 1 + 3*len(m.Value())
			for _, p := range m.Properties() {
				v, _ := p.Value()
				bound += 1 + len(p.Key()) + 1 + 3*len(v)
			}
		}
	}
	if bound <= otelsession.MaxBaggageBytes {
		return nil
	}
	nb, err := b.SetMember(sig)
	if err != nil {
		return err
	}
	if n := len(nb.String()); n > otelsession.MaxBaggageBytes {
		return fmt.Errorf("%d bytes, limit %d: %w", n, otelsession.MaxBaggageBytes, ErrSignatureNoRoom)
	}
	return nil
}

func withoutSignature(ctx context.Context) context.Context {
	b := baggage.FromContext(ctx)
	if b.Member(otelsession.SignatureKey).Key() == "" {
		return ctx
	}
	return baggage.ContextWithBaggage(ctx, b.DeleteMember(otelsession.SignatureKey))
}

// Verifier checks session signatures against several keys, so that keys can
// be rotated: one service signs with the newest key while verifiers still
// accept the previous ones. Give it to an inbound policy with
// [WithVerifier]. It is safe for concurrent use.
type Verifier struct {
	keys            map[string]*macKey
	now             func() time.Time
	maxAge, maxSkew time.Duration
}

// NewVerifier returns a Verifier that accepts signatures made with any of
// keys, issued at most the maximum age ago ([WithMaxAge]) and at most the
// maximum skew ahead ([WithMaxSkew]) by its clock ([WithClock]).
func NewVerifier(keys []Key, opts ...SignatureOption) (*Verifier, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("new session verifier: no key: %w", ErrSignatureConfig)
	}
	c, err := newSignatureConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("new session verifier: %w", err)
	}
	v := &Verifier{keys: make(map[string]*macKey, len(keys)), now: c.now, maxAge: c.maxAge, maxSkew: c.maxSkew}
	for _, k := range keys {
		if err := k.check(); err != nil {
			return nil, fmt.Errorf("new session verifier: %w", err)
		}
		if _, dup := v.keys[k.ID]; dup {
			return nil, fmt.Errorf("new session verifier: key id %q given twice: %w", k.ID, ErrSignatureConfig)
		}
		v.keys[k.ID] = newMacKey(k)
	}
	return v, nil
}

// KeyIDs returns the ids of the verify keys, sorted.
func (v *Verifier) KeyIDs() []string {
	ids := make([]string, 0, len(v.keys))
	for id := range v.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Verify checks the signature in ctx's baggage against ctx's session and
// messageID ("" where the transport has no message id), and returns nil or
// an error wrapping [ErrBadSignature] (also when there is no signature),
// [ErrUnknownKey] or [ErrSignatureExpired]. It does not validate the
// session's values; [Inbound.Extract] does both.
func (v *Verifier) Verify(ctx context.Context, messageID string) error {
	b := baggage.FromContext(ctx)
	m := b.Member(otelsession.SignatureKey)
	if m.Key() == "" {
		return fmt.Errorf("no %s member: %w", otelsession.SignatureKey, ErrBadSignature)
	}
	var vals signedValues
	vals.gather(b)
	return v.check(m.Value(), messageID, &vals)
}

// check verifies sig over vals. Authenticity is checked before freshness,
// so that a forged signature is reported as such whatever its time.
func (v *Verifier) check(sig, binding string, vals *signedValues) error {
	p, err := parseSignature(sig)
	if err != nil {
		return err
	}
	k, ok := v.keys[p.kid]
	if !ok {
		// The id passed parseSignature: at most 32 letters, digits, - or _.
		return fmt.Errorf("key id %q: %w", p.kid, ErrUnknownKey)
	}
	if !k.verify(p.ts, binding, vals, &p.mac) {
		return fmt.Errorf("MAC mismatch: %w", ErrBadSignature)
	}
	now := v.now()
	issued := time.Unix(p.ts, 0)
	// Compared as times: a Duration holds 292 years, and the difference of
	// times further apart saturates (its negation overflowed).
	switch {
	case issued.After(now.Add(v.maxSkew)):
		return fmt.Errorf("issued %v in the future, max skew %v: %w", issued.Sub(now).Round(time.Millisecond), v.maxSkew, ErrSignatureExpired)
	case now.Sub(issued) > v.maxAge:
		return fmt.Errorf("issued %v ago, max age %v: %w", now.Sub(issued).Round(time.Millisecond), v.maxAge, ErrSignatureExpired)
	}
	return nil
}

// SignatureHeader reads the key id and issue time of a session.sig value
// without checking its MAC: what a tool shows beside a [Verifier]'s verdict,
// never a verdict itself. A value that is not a well-formed signature
// returns an error wrapping [ErrBadSignature].
func SignatureHeader(sig string) (keyID string, issued time.Time, err error) {
	p, err := parseSignature(sig)
	if err != nil {
		return "", time.Time{}, err
	}
	return p.kid, time.Unix(p.ts, 0).UTC(), nil
}

// parsedSignature is a session.sig value: v1.<key id>.<unix seconds>.<MAC>.
type parsedSignature struct {
	kid string
	ts  int64
	mac [macBytes]byte
}

// parseSignature reads a signature value strictly: one spelling per
// signature (no leading zeros, no sign, canonical base64url), so that a
// signature cannot be re-encoded into a second valid one.
func parseSignature(s string) (parsedSignature, error) {
	var p parsedSignature
	bad := func(what string) (parsedSignature, error) {
		return parsedSignature{}, fmt.Errorf("malformed signature: %s: %w", what, ErrBadSignature)
	}
	if len(s) > maxSignatureLen {
		return bad("too long")
	}
	rest, ok := cutPrefix(s, signatureVersion+".")
	if !ok {
		return bad("not version " + signatureVersion)
	}
	i := indexDot(rest)
	if i < 1 || i > MaxKeyIDBytes || !validKeyID(rest[:i]) {
		return bad("key id")
	}
	p.kid, rest = rest[:i], rest[i+1:]
	i = indexDot(rest)
	if i < 1 || i > maxTimeDigits || rest[0] == '0' && i > 1 {
		return bad("issue time")
	}
	for j := 0; j < i; j++ {
		c := rest[j]
		if c < '0' || c > '9' {
			return bad("issue time")
		}
		p.ts = p.ts*10 + int64(c-'0')
	}
	rest = rest[i+1:]
	if len(rest) != macText {
		return bad("MAC length")
	}
	if n, err := macEncoding.Decode(p.mac[:], []byte(rest)); err != nil || n != macBytes {
		return bad("MAC encoding")
	}
	return p, nil
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return s, false
	}
	return s[len(prefix):], true
}

func indexDot(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}

func formatSignature(kid string, ts int64, sum *[macBytes]byte) string {
	var b [maxSignatureLen]byte
	return string(appendSignature(b[:0], kid, ts, sum))
}

// signedKeys are the members a signature covers, sorted by key: the rows of
// the wire-key table marked Signed (every remote field and the
// async-delivery capability). Local fields and the working directory never
// travel (the inbound policy refuses them), and members outside the session
// are the application's.
var signedKeys = func() []string {
	var keys []string
	for _, s := range otelsession.Specs() {
		if s.Signed {
			keys = append(keys, s.Key)
		}
	}
	slices.Sort(keys)
	if len(keys) > maxSignedKeys {
		panic("propagation: more signed keys in the wire-key table than fields and the async-delivery key")
	}
	return keys
}()

// maxSignedKeys bounds the signed rows: only fields and the async-delivery
// capability can be signed (the signature cannot cover itself).
const maxSignedKeys = otelsession.NumFields + 1

// signedPos maps a field's index in fieldKeys (Field order) to its position
// in signedKeys, -1 for local fields; asyncPos is the async-delivery key's
// position.
var signedPos, asyncPos = func() ([]int, int) {
	pos := make([]int, len(fieldKeys))
	for i, c := range fieldKeys {
		pos[i] = slices.Index(signedKeys, c.spec.Key) // -1 for local fields
	}
	return pos, slices.Index(signedKeys, otelsession.AsyncDeliveryKey)
}()

// signedValues holds the covered members of one baggage, in signedKeys
// order: each value exactly as decoded (Cleared is the NUL byte), and
// whether the member is present at all, so that absent and Cleared differ.
type signedValues [maxSignedKeys]struct {
	v  string
	ok bool
}

// encodedBound returns how many members vals holds and an upper bound of
// their W3C encoding, separators included: every byte of a value escaped.
func (vals *signedValues) encodedBound() (n, size int) {
	for i := range vals {
		if vals[i].ok {
			n++
			size += 1 + len(signedKeys[i]) + 1 + 3*len(vals[i].v)
		}
	}
	return n, size
}

func (vals *signedValues) gather(b baggage.Baggage) {
	if b.Len() == 0 {
		return
	}
	for i, k := range signedKeys {
		if m := b.Member(k); m.Key() != "" {
			vals[i].v, vals[i].ok = m.Value(), true
		}
	}
}

// appendSigned appends the MAC input: the domain, then each part with a
// length prefix (uvarint), so that no two different inputs share an
// encoding: key id, issue time, message binding, the number of covered
// members present, and each present member as key and value in key order.
func appendSigned(buf []byte, kid string, ts int64, binding string, vals *signedValues) []byte {
	buf = append(buf, macDomain...)
	buf = appendPart(buf, kid)
	buf = binary.BigEndian.AppendUint64(buf, uint64(ts))
	buf = appendPart(buf, binding)
	n := 0
	for i := range signedKeys {
		if vals[i].ok {
			n++
		}
	}
	buf = binary.AppendUvarint(buf, uint64(n))
	for i, k := range signedKeys {
		if vals[i].ok {
			buf = appendPart(buf, k)
			buf = appendPart(buf, vals[i].v)
		}
	}
	return buf
}

func appendPart(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// macKey is one key ready to use: HMAC states are pooled, since building
// one hashes the key twice and allocates.
type macKey struct {
	id   string
	pool sync.Pool // of *macState
}

type macState struct {
	h   hash.Hash
	buf []byte
	sum [macBytes]byte
}

func newMacKey(k Key) *macKey {
	secret := bytes.Clone(k.Secret)
	mk := &macKey{id: k.ID}
	mk.pool.New = func() any {
		return &macState{h: hmac.New(sha256.New, secret), buf: make([]byte, 0, 1024)}
	}
	return mk
}

// compute leaves the MAC of the input in st.sum.
func (k *macKey) compute(st *macState, ts int64, binding string, vals *signedValues) {
	st.buf = appendSigned(st.buf[:0], k.id, ts, binding, vals)
	st.h.Reset()
	st.h.Write(st.buf)
	st.h.Sum(st.sum[:0])
}

func (k *macKey) sum(ts int64, binding string, vals *signedValues, out *[macBytes]byte) {
	st := k.pool.Get().(*macState)
	k.compute(st, ts, binding, vals)
	*out = st.sum
	k.put(st)
}

func (k *macKey) verify(ts int64, binding string, vals *signedValues, mac *[macBytes]byte) bool {
	st := k.pool.Get().(*macState)
	k.compute(st, ts, binding, vals)
	ok := hmac.Equal(st.sum[:], mac[:])
	k.put(st)
	return ok
}

func (k *macKey) put(st *macState) {
	if cap(st.buf) > 64<<10 { // an oversized session once; do not keep its buffer
		st.buf = make([]byte, 0, 1024)
	}
	k.pool.Put(st)
}
