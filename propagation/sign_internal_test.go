package propagation

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
)

// The MAC input is an injective encoding: inputs that differ anywhere (a
// boundary moved between two parts, a member absent instead of empty or
// Cleared) never encode alike, or a signature over one would verify the
// other.
func TestSignedEncodingIsInjective(t *testing.T) {
	pos := func(key string) int {
		for i, k := range signedKeys {
			if k == key {
				return i
			}
		}
		t.Fatalf("%s is not covered", key)
		return -1
	}
	chat, name, thread := pos("session.chat_id"), pos("session.chat_name"), pos("session.thread_id")
	type input struct {
		kid     string
		ts      int64
		binding string
		set     map[int]string
	}
	inputs := map[string]input{
		"empty":                            {"k1", 1, "", nil},
		"another key id":                   {"k2", 1, "", nil},
		"a key id longer by the binding":   {"k1a", 1, "", nil},
		"the binding":                      {"k1", 1, "a", nil},
		"another time":                     {"k1", 2, "", nil},
		"chat Cleared":                     {"k1", 1, "", map[int]string{chat: otelsession.ClearedValue}},
		"chat empty":                       {"k1", 1, "", map[int]string{chat: ""}},
		"name Cleared":                     {"k1", 1, "", map[int]string{name: otelsession.ClearedValue}},
		"chat ab":                          {"k1", 1, "", map[int]string{chat: "ab"}},
		"chat a, name b":                   {"k1", 1, "", map[int]string{chat: "a", name: "b"}},
		"chat a, thread b":                 {"k1", 1, "", map[int]string{chat: "a", thread: "b"}},
		"chat holding the next member":     {"k1", 1, "", map[int]string{chat: "a\x11session.chat_name\x01b"}},
		"chat a, name holding the length":  {"k1", 1, "", map[int]string{chat: "a", name: "\x01b"}},
		"binding holding the member count": {"k1", 1, "\x00", nil},
	}
	seen := map[string]string{}
	for name, in := range inputs {
		var vals signedValues
		for i, v := range in.set {
			vals[i].v, vals[i].ok = v, true
		}
		enc := string(appendSigned(nil, in.kid, in.ts, in.binding, &vals))
		if !strings.HasPrefix(enc, macDomain) {
			t.Errorf("%s: the input does not start with the domain", name)
		}
		if other, dup := seen[enc]; dup {
			t.Errorf("%q and %q encode alike: %q", name, other, enc)
		}
		seen[enc] = name
	}
}

// Hostile input must not flood the logs: each kind of signature failure
// reaches otel.Handle once per process, without a session value, however
// often it happens. Not parallel: it swaps the global error handler.
func TestSignatureFailuresAreReportedOncePerKind(t *testing.T) {
	var (
		mu      sync.Mutex
		reports []error
	)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		reports = append(reports, err)
		mu.Unlock()
	}))
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
	kinds := []error{ErrBadSignature, ErrSignatureExpired, ErrUnknownKey}
	for _, k := range kinds {
		reported.Delete(k) // whatever earlier tests reported
	}

	key := Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))}
	at := time.Unix(1_767_225_600, 0)
	clock := func() time.Time { return at }
	verifier, err := NewVerifier([]Key{key}, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k Key, when time.Time) string {
		s, err := NewSigner(k, WithClock(func() time.Time { return when }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, err := s.Sign(otelsession.Bind(context.Background(), otelsession.Session{ChatID: "secret-chat-value"}))
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		otelprop.Baggage{}.Inject(ctx, otelprop.HeaderCarrier(h))
		return h.Get("Baggage")
	}
	inputs := map[error]string{
		ErrBadSignature:     strings.Replace(sign(key, at), "secret-chat-value", "secret-chat-valuf", 1),
		ErrSignatureExpired: sign(key, at.Add(-time.Hour)),
		ErrUnknownKey:       sign(Key{ID: "k9", Secret: key.Secret}, at),
	}
	policy := NewInbound(TrustNone, WithVerifier(verifier))
	for range 3 {
		for kind, line := range inputs {
			_, err := policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier{"Baggage": {line}}, Peer{Transport: "test"})
			if !errors.Is(err, kind) {
				t.Fatalf("err = %v, want %v", err, kind)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, kind := range kinds {
		n := 0
		for _, r := range reports {
			if errors.Is(r, kind) {
				n++
			}
			if strings.Contains(r.Error(), "secret-chat") {
				t.Errorf("report quotes a session value: %v", r)
			}
		}
		if n != 1 {
			t.Errorf("%v reported %d times, want once", kind, n)
		}
	}
	if c := policy.Counts(); c.BadSignature != 3 || c.Expired != 3 || c.UnknownKey != 3 {
		t.Errorf("counts = %+v, want each failure counted every time", c)
	}
}
