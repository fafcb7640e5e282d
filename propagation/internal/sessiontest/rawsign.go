package sessiontest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/otelsession"
)

// RawSigner signs a session as a program without sessionwire would, to send
// the bytes a signing propagation.Outbound sends: HMAC-SHA256 (crypto/hmac,
// crypto/sha256) over the same input the Signer MACs, the session.sig member
// built with baggage.NewMemberRaw and added with Baggage.SetMember. It is the
// baseline of the signed benchmark rows (path=raw_signed): what signing
// costs with OpenTelemetry and the standard library alone. It keeps one HMAC
// and one buffer, as a program signing every message would, and does no
// more than the signature needs (no W3C limit check, no validation). Not
// safe for concurrent use.
type RawSigner struct {
	kid  string
	now  func() time.Time
	mac  hash.Hash
	buf  []byte
	sum  []byte
	vals []string // per rawSignedKeys row
	has  []bool
}

// rawDomain starts every MAC input (the Signer's format, version 1).
const rawDomain = "sessionwire session.sig v1\x00"

// rawSignedKeys are the members a signature covers, sorted: the wire-key
// table's rows marked Signed.
var rawSignedKeys = func() []string {
	var keys []string
	for _, s := range otelsession.Specs() {
		if s.Signed {
			keys = append(keys, s.Key)
		}
	}
	slices.Sort(keys)
	return keys
}()

// NewRawSigner returns a RawSigner for the key kid, secret, reading the
// issue time from now.
func NewRawSigner(kid string, secret []byte, now func() time.Time) *RawSigner {
	return &RawSigner{kid: kid, now: now, mac: hmac.New(sha256.New, secret), buf: make([]byte, 0, 1024),
		sum: make([]byte, 0, sha256.Size), vals: make([]string, len(rawSignedKeys)), has: make([]bool, len(rawSignedKeys))}
}

// Sign returns ctx with the session of its baggage signed for messageID (""
// for none).
func (r *RawSigner) Sign(ctx context.Context, messageID string) (context.Context, error) {
	b := baggage.FromContext(ctx)
	ts := r.now().Unix()
	n := 0
	for i, k := range rawSignedKeys {
		m := b.Member(k)
		r.vals[i], r.has[i] = m.Value(), m.Key() != ""
		if r.has[i] {
			n++
		}
	}
	// The input: domain, then length-prefixed (uvarint) parts: key id, the
	// issue time (8 bytes, big-endian), the message id, the member count,
	// and each present member's key and value in key order.
	buf := append(r.buf[:0], rawDomain...)
	buf = appendRawPart(buf, r.kid)
	buf = binary.BigEndian.AppendUint64(buf, uint64(ts))
	buf = appendRawPart(buf, messageID)
	buf = binary.AppendUvarint(buf, uint64(n))
	for i, k := range rawSignedKeys {
		if r.has[i] {
			buf = appendRawPart(buf, k)
			buf = appendRawPart(buf, r.vals[i])
		}
	}
	r.buf = buf
	r.mac.Reset()
	r.mac.Write(buf)
	r.sum = r.mac.Sum(r.sum[:0])
	sig := "v1." + r.kid + "." + strconv.FormatInt(ts, 10) + "." + base64.RawURLEncoding.EncodeToString(r.sum)
	m, err := baggage.NewMemberRaw(otelsession.SignatureKey, sig)
	if err != nil {
		return ctx, fmt.Errorf("raw signature member: %w", err)
	}
	nb, err := b.SetMember(m)
	if err != nil {
		return ctx, fmt.Errorf("raw signature: add the member: %w", err)
	}
	return baggage.ContextWithBaggage(ctx, nb), nil
}

func appendRawPart(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}
