package otelsession_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sessionwire/sessionwire/otelsession"
)

// FuzzOriginUnmarshal feeds stored routing origins (JSON, as a router reads
// them back from a queue or a database, possibly corrupted or forged) to
// Origin.UnmarshalJSON. Whatever the input:
//   - it does not panic;
//   - with an error, the target is left exactly as it was (nothing is
//     half-decoded) and, unless the input is not JSON at all, the error
//     names a routing origin;
//   - without one, the origin validates: a platform and a chat, every value
//     one Bind accepts, a traceparent that parses; it survives a JSON round
//     trip unchanged; and binding it yields exactly its routing fields;
//   - the same input gives the same outcome twice.
//
// Run it with
//
//	go test ./otelsession -run '^$' -fuzz '^FuzzOriginUnmarshal$' -fuzztime 20s -parallel 1
func FuzzOriginUnmarshal(f *testing.F) {
	for _, seed := range []string{
		`{"platform":"telegram","chat_id":"-100123","thread_id":"17585","message_id":"88121","scope_id":"guild-7","user_id":"u-42"}`,
		`{"platform":"slack","chat_id":"C1","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"vendor=opaque"}`,
		`{"platform":"telegram"}`,
		`{"platform":"telegram","chat_id":"1","thread_id":"a\u0000b"}`,
		`{"platform":"telegram","chat_id":"1","traceparent":"00-zz-01"}`,
		`{"platform":"telegram","chat_id":"1","traceparent":"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
		`{"platform":"telegram","chat_id":"1","tracestate":"` + strings.Repeat("k=v,", 40) + `"}`,
		`{"PLATFORM":"telegram","Chat_ID":"1"}`,
		`{"platform":"telegram","chat_id":"1","platform":"discord"}`,
		`{"platform":"telegram","chat_id":"\ud800"}`,
		`{"platform":"tele\u2028gram","chat_id":"1\r\n2"}`,
		`{"platform":7,"chat_id":"1"}`,
		`{"platform":"discord","chat_id":"D1","chat_type":"dm","user_id":"u1"}`,
		`{"platform":"discord","chat_id":"D1","chat_type":"` + strings.Repeat("d", 65) + `"}`,
		`null`,
		`[]`,
		`{"platform":"telegram","chat_id":"` + strings.Repeat("x", 513) + `"}`,
		// Every value within its own limit, the whole over the W3C 8192 bytes
		// once percent-encoded (each é is six bytes on the wire).
		`{"platform":"` + strings.Repeat("é", 256) + `","chat_id":"` + strings.Repeat("é", 256) +
			`","thread_id":"` + strings.Repeat("é", 256) + `","parent_chat_id":"` + strings.Repeat("é", 256) +
			`","message_id":"` + strings.Repeat("é", 256) + `","scope_id":"` + strings.Repeat("é", 256) + `"}`,
	} {
		f.Add([]byte(seed))
	}
	sentinel := otelsession.Origin{Platform: "sentinel", ChatID: "untouched"}

	f.Fuzz(func(t *testing.T, data []byte) {
		o := sentinel
		err := o.UnmarshalJSON(data)
		if err != nil {
			if o != sentinel {
				t.Fatalf("refused (%v) but the origin changed to %+v", err, o)
			}
			if json.Valid(data) && !strings.Contains(err.Error(), "routing origin") {
				t.Fatalf("error %q does not name a routing origin", err)
			}
		} else {
			if verr := o.Validate(); verr != nil {
				t.Fatalf("accepted an origin that does not validate: %v", verr)
			}
			for _, v := range []string{o.Platform, o.ChatID, o.ThreadID, o.ParentChatID, o.MessageID, o.ScopeID, o.UserID, o.SessionKey} {
				if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 || len(v) > otelsession.MaxValueBytes {
					t.Fatalf("accepted a value Bind refuses: %q", v)
				}
			}
			if o.TraceParent != "" {
				if _, ok := o.SpanContext(); !ok {
					t.Fatalf("accepted traceparent %q that does not parse", o.TraceParent)
				}
			}
			out, merr := json.Marshal(o)
			if merr != nil {
				t.Fatalf("accepted origin does not encode: %v", merr)
			}
			var back otelsession.Origin
			if uerr := json.Unmarshal(out, &back); uerr != nil || back != o {
				t.Fatalf("round trip: %+v (%v), want %+v", back, uerr, o)
			}
			got := otelsession.OriginFrom(o.Bind(context.Background()))
			want := o
			want.TraceParent, want.TraceState = "", "" // no span is current after Bind
			if got != want {
				t.Fatalf("bound and captured again: %+v, want %+v", got, want)
			}
		}
		again := sentinel
		err2 := again.UnmarshalJSON(data)
		if (err == nil) != (err2 == nil) || again != o {
			t.Fatalf("same input, different outcomes: %v %+v, then %v %+v", err, o, err2, again)
		}
	})
}
