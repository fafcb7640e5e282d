package propagation_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// attackSession is the session the gateway signed in TestNamedAttacks. Its
// values end in "x9" so that a test can tell that no error text quotes one.
var attackSession = otelsession.Session{
	Platform: "slack-x9", Source: "gateway-x9", ChatID: "chat-x9", ChatType: "group-x9",
	ThreadID: "thread-x9", UserID: "user-x9", UserIDAlt: "alt-x9", UserName: "name-x9",
	ScopeID: "scope-x9", SessionKey: "key-x9", SessionID: "sid-x9", MessageID: "msg-x9",
	Profile: "profile-x9", ParentChatID: "parent-x9", Cron: otelsession.CronOn,
	// ChatName stays empty: a Cleared member (session.chat_name=%00) is signed too.
}

// members edits one baggage header line member by member. Keys are compared
// after trimming, as the W3C parser does.
type members []string

func splitMembers(line string) members { return strings.Split(line, ",") }

func (m members) String() string { return strings.Join(m, ",") }

func memberKey(member string) string {
	end := strings.IndexAny(member, "=;")
	if end < 0 {
		end = len(member)
	}
	return strings.TrimSpace(member[:end])
}

func (m members) set(key, member string) members {
	out := slices.Clone(m)
	for i, mem := range out {
		if memberKey(mem) == key {
			out[i] = member
			return out
		}
	}
	panic("no member " + key + " in " + m.String())
}

func (m members) drop(key string) members {
	return slices.DeleteFunc(slices.Clone(m), func(mem string) bool { return memberKey(mem) == key })
}

func (m members) add(member ...string) members { return append(slices.Clone(m), member...) }

func (m members) value(key string) string {
	for _, mem := range m {
		if memberKey(mem) == key {
			_, v, _ := strings.Cut(mem, "=")
			return v
		}
	}
	panic("no member " + key)
}

// TestNamedAttacks runs each named attack against a service that trusts no
// peer and verifies signatures (the configuration signing exists for), or,
// where the case says so, one that trusts the peer and still verifies. The
// gateway signed attackSession with key k1 at signTime, for the request, a
// minute before it arrives; k0 is a key the service retired.
//
// Every case also checks, whatever the outcome, that the baggage members
// that are not the session's pass exactly as the stock propagator extracts
// them, that a refused session leaves neither a member nor the signature
// behind, and that no error text quotes a session value.
func TestNamedAttacks(t *testing.T) {
	k1, k0 := testKey("k1"), testKey("k0")
	arrival := signTime.Add(time.Minute)
	verifier := mustVerifier(t, arrival, k1)
	bound := otelsession.Bind(context.Background(), attackSession)
	sign := func(key propagation.Key, at time.Time, messageID string) members {
		ctx, err := mustSigner(t, key, at).SignFor(bound, messageID)
		if err != nil {
			t.Fatal(err)
		}
		lines := headerLines(ctx)
		if len(lines) != 1 {
			t.Fatalf("test setup: %d header lines", len(lines))
		}
		return splitMembers(lines[0])
	}
	genuine := sign(k1, signTime, "")
	sig := genuine.value(otelsession.SignatureKey)
	otherSession, err := mustSigner(t, k1, signTime).Sign(otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack-x9", ChatID: "other-x9"}))
	if err != nil {
		t.Fatal(err)
	}
	otherSig := baggage.FromContext(otherSession).Member(otelsession.SignatureKey).Value()
	sigMember := otelsession.SignatureKey + "=" + sig
	deep := func(depth int) string { // "c" percent-encoded depth times: %63, %2563, %252563, …
		return "%" + strings.Repeat("25", depth-1) + "63"
	}

	signed := remoteSession(attackSession)
	type outcome struct {
		err     error                           // nil: the session was accepted or stripped as untrusted
		counts  propagation.Counts              // the policy's counts afterwards
		session map[otelsession.Field]fieldSeen // nil: wholly Unset
	}
	accepted := outcome{counts: propagation.Counts{Accepted: 1, Signed: 1}, session: signed}
	untrusted := outcome{counts: propagation.Counts{Untrusted: 1}}
	rejected := func(err error, c propagation.Counts) outcome {
		c.Rejected = 1
		return outcome{err: err, counts: c}
	}
	badSig := outcome{err: propagation.ErrBadSignature, counts: propagation.Counts{BadSignature: 1}}
	expired := outcome{err: propagation.ErrSignatureExpired, counts: propagation.Counts{Expired: 1}}
	unknownKey := outcome{err: propagation.ErrUnknownKey, counts: propagation.Counts{UnknownKey: 1}}

	cases := []struct {
		name      string
		lines     []string
		messageID string // the carrier's message id (Peer.MessageID)
		trusted   bool   // the TrustFunc trusts the peer
		want      outcome
	}{
		// Controls.
		{name: "the genuine signed session", lines: []string{genuine.String()}, want: accepted},
		{name: "the session unsigned", lines: []string{genuine.drop(otelsession.SignatureKey).String()}, want: untrusted},
		{name: "the session unsigned, from a trusted peer", lines: []string{genuine.drop(otelsession.SignatureKey).String()}, trusted: true,
			want: outcome{counts: propagation.Counts{Accepted: 1}, session: signed}},

		// Size and volume.
		{name: "oversized header", lines: []string{genuine.add("app.pad=" + strings.Repeat("p", 8200)).String()},
			want: rejected(propagation.ErrBaggageTooLarge, propagation.Counts{TooLarge: 1})},
		{name: "10,000 members", lines: []string{genuine.add(manyMembers(10000, "m%d=v")).String()},
			want: rejected(propagation.ErrBaggageTooLarge, propagation.Counts{TooLarge: 1})},
		{name: "many baggage header lines", lines: append([]string{genuine.String()}, repeatLine(500, "app.k=v")...),
			want: rejected(propagation.ErrBaggageTooLarge, propagation.Counts{TooLarge: 1})},
		{name: "the signed session sent twice", lines: []string{genuine.String(), genuine.String()},
			want: rejected(propagation.ErrDuplicateMember, propagation.Counts{Duplicate: 1})},

		// Encoding.
		{name: "deep percent-encoding (%2525…) of a signed value is decoded once and breaks the signature",
			lines: []string{genuine.set("session.chat_id", "session.chat_id="+deep(6)+"hat-x9").String()}, want: badSig},
		{name: "deep percent-encoding in a foreign member passes, decoded once",
			lines: []string{genuine.add("app.x=" + deep(8)).String()}, want: accepted},
		{name: "deep percent-encoding from a trusted peer is the literal value, decoded once",
			lines: []string{"session.chat_id=" + deep(4)}, trusted: true,
			want: outcome{counts: propagation.Counts{Accepted: 1}, session: remoteOnly(map[otelsession.Field]string{otelsession.FieldChatID: "%252563"})}},
		{name: "invalid UTF-8 in a signed value", lines: []string{genuine.set("session.chat_id", "session.chat_id=%FFhat-x9").String()},
			want: rejected(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{name: "invalid UTF-8 in a foreign member passes as otel decodes it", lines: []string{genuine.add("app.x=%FF%FE").String()}, want: accepted},
		{name: "NUL inside a value", lines: []string{genuine.set("session.chat_id", "session.chat_id=chat%00-x9").String()},
			want: rejected(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},
		{name: "CRLF raw in a value", lines: []string{genuine.set("session.thread_id", "session.thread_id=t\r\nX-Injected: 1").String()},
			want: rejected(propagation.ErrMalformedMember, propagation.Counts{Malformed: 1})},
		{name: "CRLF percent-encoded in a value", lines: []string{genuine.set("session.thread_id", "session.thread_id=t%0D%0AX-Injected:%201").String()},
			want: rejected(propagation.ErrInvalidValue, propagation.Counts{InvalidValue: 1})},

		// Key confusion. Keys are case-sensitive ASCII tokens: a look-alike is
		// another member (or an invalid one, which otel drops), never a
		// session field, and the signature does not cover it.
		{name: "key in another case is refused", lines: []string{genuine.add("Session.Chat_ID=forged", "SESSION.SCOPE_ID=forged").String()},
			want: rejected(propagation.ErrUnknownSessionKey, propagation.Counts{UnknownSessionKey: 1})},
		{name: "whitespace around signed members is allowed and trimmed",
			lines: []string{genuine.set("session.chat_id", " \tsession.chat_id\t = chat-x9 ").String()}, want: accepted},
		{name: "whitespace-padded key with a forged value is the session key, and breaks the signature",
			lines: []string{genuine.set("session.chat_id", "  session.chat_id =forged").String()}, want: badSig},
		{name: "look-alike key with a Cyrillic s (ѕession.chat_id) is dropped by otel",
			lines: []string{genuine.add("ѕession.chat_id=forged").String()}, want: accepted},
		{name: "look-alike key replacing the real one removes a signed member",
			lines: []string{genuine.drop("session.chat_id").add("ѕession.chat_id=chat-x9").String()}, want: badSig},
		{name: "full-width key (ｓｅｓｓｉｏｎ.chat_id) is dropped by otel",
			lines: []string{genuine.add("ｓｅｓｓｉｏｎ.chat_id=forged").String()}, want: accepted},
		{name: "percent-encoded key is refused (one JavaScript hop would decode it)", lines: []string{genuine.add("session%2Echat_id=forged").String()},
			want: rejected(propagation.ErrUnknownSessionKey, propagation.Counts{UnknownSessionKey: 1})},

		// Duplicates.
		{name: "duplicate session key with a conflicting value", lines: []string{genuine.add("session.chat_id=forged").String()},
			want: rejected(propagation.ErrDuplicateMember, propagation.Counts{Duplicate: 1})},
		{name: "duplicate session key on another header line", lines: []string{genuine.String(), "session.chat_id=forged"},
			want: rejected(propagation.ErrDuplicateMember, propagation.Counts{Duplicate: 1})},

		// The Cleared marker.
		{name: "the Cleared sentinel in a non-session key passes as a foreign value", lines: []string{genuine.add("app.flag=%00").String()}, want: accepted},
		{name: "a signed Cleared field removed (Cleared → Unset)", lines: []string{genuine.drop("session.chat_name").String()}, want: badSig},
		{name: "a signed Cleared field written as an empty value", lines: []string{genuine.set("session.chat_name", "session.chat_name=").String()}, want: badSig},
		{name: "an Unset field added as Cleared", lines: []string{genuine.add("session.cron_auto_deliver_platform=%00").String()}, want: badSig},
		{name: "the Cleared sentinel as the signature", lines: []string{genuine.set(otelsession.SignatureKey, otelsession.SignatureKey+"=%00").String()}, want: badSig},

		// Tampering with the signed session.
		{name: "a signed member changed", lines: []string{genuine.set("session.thread_id", "session.thread_id=thread-y9").String()}, want: badSig},
		{name: "the scope forged", lines: []string{genuine.set("session.scope_id", "session.scope_id=admin-guild").String()}, want: badSig},
		{name: "a session member added", lines: []string{genuine.add("session.cron_auto_deliver_chat_id=elsewhere").String()}, want: badSig},
		{name: "a stateless channel declared after signing", lines: []string{genuine.add("session.async_delivery=0").String()}, want: badSig},
		{name: "a signed member removed", lines: []string{genuine.drop("session.user_id").String()}, want: badSig},
		{name: "a local field added", lines: []string{genuine.add("session.ui_session_id=tab").String()},
			want: rejected(propagation.ErrLocalField, propagation.Counts{LocalField: 1})},
		{name: "a foreign member changed, added and removed", lines: []string{genuine.add("app.tenant=acme", "app.other=1").String()}, want: accepted},
		{name: "properties on a signed member are not covered", lines: []string{genuine.set("session.chat_id", "session.chat_id=chat-x9;p=1").String()}, want: accepted},

		// The signature itself.
		{name: "a signature from a retired key", lines: []string{sign(k0, signTime, "").String()}, want: unknownKey},
		{name: "a key id in another case", lines: []string{genuine.set(otelsession.SignatureKey, otelsession.SignatureKey+"="+strings.Replace(sig, "v1.k1.", "v1.K1.", 1)).String()}, want: unknownKey},
		{name: "an expired signature", lines: []string{sign(k1, arrival.Add(-propagation.DefaultMaxAge-time.Second), "").String()}, want: expired},
		{name: "a signature from the future", lines: []string{sign(k1, arrival.Add(propagation.DefaultMaxSkew+time.Second), "").String()}, want: expired},
		{name: "a signature moved to another message", lines: []string{sign(k1, signTime, "m-1").String()}, messageID: "m-2", want: badSig},
		{name: "a bound signature on its own message", lines: []string{sign(k1, signTime, "m-1").String()}, messageID: "m-1", want: accepted},
		{name: "a truncated signature", lines: []string{genuine.set(otelsession.SignatureKey, sigMember[:len(sigMember)-5]).String()}, want: badSig},
		{name: "a signature with one MAC character changed", lines: []string{genuine.set(otelsession.SignatureKey, flipMAC(sigMember)).String()}, want: badSig},
		{name: "a signature of another session", lines: []string{genuine.set(otelsession.SignatureKey, otelsession.SignatureKey+"="+otherSig).String()}, want: badSig},
		{name: "a signature alone, without its session", lines: []string{sigMember}, want: badSig},
		{name: "a signature of version v2", lines: []string{genuine.set(otelsession.SignatureKey, strings.Replace(sigMember, "=v1.", "=v2.", 1)).String()}, want: badSig},
		{name: "an issue time with a leading zero", lines: []string{genuine.set(otelsession.SignatureKey, strings.Replace(sigMember, ".1767225600.", ".01767225600.", 1)).String()}, want: badSig},
		{name: "a key id over 32 bytes", lines: []string{genuine.set(otelsession.SignatureKey, strings.Replace(sigMember, ".k1.", "."+strings.Repeat("k", 33)+".", 1)).String()}, want: badSig},
		{name: "two session.sig members", lines: []string{genuine.add(sigMember).String()},
			want: rejected(propagation.ErrDuplicateMember, propagation.Counts{Duplicate: 1})},
		{name: "two session.sig members on two header lines", lines: []string{genuine.String(), otelsession.SignatureKey + "=" + otherSig},
			want: rejected(propagation.ErrDuplicateMember, propagation.Counts{Duplicate: 1})},
		{name: "a forged signature from a trusted peer is refused", trusted: true,
			lines: []string{genuine.set("session.thread_id", "session.thread_id=thread-y9").String()}, want: badSig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			trust := propagation.TrustNone
			if tc.trusted {
				trust = propagation.TrustAll
			}
			policy := propagation.NewInbound(trust, propagation.WithVerifier(verifier))
			header := http.Header{"Baggage": tc.lines}
			ctx, err := policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(header),
				propagation.Peer{Transport: "http", MessageID: tc.messageID})

			if tc.want.err == nil && err != nil || tc.want.err != nil && !errors.Is(err, tc.want.err) {
				t.Errorf("err = %v, want %v", err, tc.want.err)
			}
			if err != nil && strings.Contains(err.Error(), "x9") || err != nil && strings.Contains(err.Error(), "forged") {
				t.Errorf("the error quotes a session value: %v", err)
			}
			if got := policy.Counts(); got != tc.want.counts {
				t.Errorf("counts = %+v, want %+v", got, tc.want.counts)
			}
			want := tc.want.session
			if want == nil {
				want = allUnset()
			}
			if got := sessionSeen(ctx); !maps.Equal(got, want) {
				t.Errorf("session = %v\nwant      %v", got, want)
			}
			b := baggage.FromContext(ctx)
			hasSig := b.Member(otelsession.SignatureKey).Key() != ""
			if wantSig := tc.want.counts.Signed == 1 && tc.messageID == ""; hasSig != wantSig {
				t.Errorf("signature in the context: %v, want %v", hasSig, wantSig)
			}
			if tc.want.session == nil && b.Member(otelsession.AsyncDeliveryKey).Key() != "" {
				t.Error("a refused session left session.async_delivery")
			}
			raw := baggage.FromContext(otelprop.Baggage{}.Extract(context.Background(), otelprop.HeaderCarrier(header)))
			if got, want := foreignOnly(b), foreignOnly(raw); !maps.Equal(got, want) {
				t.Errorf("foreign members = %v, plain otel extracts %v", got, want)
			}
		})
	}
}

// remoteOnly is a whole session in which only the given fields are Set.
func remoteOnly(set map[otelsession.Field]string) map[otelsession.Field]fieldSeen {
	m := allUnset()
	for f, v := range set {
		m[f] = fieldSeen{otelsession.Set, v}
	}
	return m
}

// foreignOnly lists the members that are neither session fields nor the
// signature, as key → member string.
func foreignOnly(b baggage.Baggage) map[string]string {
	m := foreignOf(b)
	delete(m, otelsession.SignatureKey)
	return m
}

// flipMAC changes the first character of a signature member's MAC, keeping
// it canonical base64url, so that only the MAC comparison can refuse it.
func flipMAC(member string) string {
	i := len(member) - 43
	repl := byte('A')
	if member[i] == 'A' {
		repl = 'B'
	}
	return member[:i] + string(repl) + member[i+1:]
}
