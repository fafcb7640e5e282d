package propagation_test

// The W3C Baggage test cases, ported to what sessionwire parses.
//
// Source: github.com/w3c/baggage at commit 9af80f4da04efa3578055811a04b8c810761be38
// (June 2025):
//   - test/test_baggage.py: classes BaggageTest, BaggageEntryTest and
//     LimitsTest. A row named "BaggageEntryTest/test_parse_kv_property" ports
//     that method. test_ctor_default (both classes) builds objects without
//     parsing anything and is not ported.
//   - test/baggage/baggage.py, the reference parser those tests run: its
//     key/value grammar (_KEY_FORMAT, _VALUE_FORMAT, _KV_FORMAT_RE) raises
//     ValueError on what the test file never feeds it. Rows named
//     "baggage.py/…" port those refusals.
//   - baggage/HTTP_HEADER_FORMAT.md, the specification text: its examples,
//     the limits over several headers, duplicates and U+FFFD. Rows named
//     "HTTP_HEADER_FORMAT/…".
//
// Each row is checked twice:
//
//  1. through the stock otel-go propagation.Baggage{} (what any Go service in
//     the path does): the members, values and properties it extracts, and
//     that re-injecting them loses nothing;
//  2. through sessionwire's Inbound.Extract with a trusting policy, after the
//     row's keys are renamed to session keys (SomeKey → session.chat_id,
//     SomeKey2 → session.thread_id, …): what the stock propagator accepts
//     must read back through otelsession.Lookup with the same value; what is
//     invalid must give a refused, wholly Unset session and an error wrapping
//     the named reason, while other members pass as the propagator left them.
//
// Where otel-go or sessionwire deviates from the W3C text, the row says so in
// a comment and asserts what we do.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// w3cMember is one extracted list-member: its decoded value and its properties
// in order, each "key" or "key=decoded value".
type w3cMember struct {
	Value string
	Props []string
}

type w3cCase struct {
	name   string
	header []string // the baggage header lines of the W3C case
	// headerBytes, when set, is the size the W3C case gives its header (all
	// lines and the commas that would join them), checked so that a limit
	// case cannot drift off its limit.
	headerBytes int
	want        map[string]w3cMember // what the stock propagator extracts; nil: nothing
	// wantInjected, when set, is exactly what the stock propagator writes
	// back for want, one string per list-member (their order is not
	// defined).
	wantInjected []string

	// rename maps the case's keys to session keys (w3cDefaultRename when nil).
	rename map[string]string
	// session overrides the renamed header (limit cases, whose byte counts
	// matter), and sessionWant what the stock propagator extracts from it.
	session     []string
	sessionWant map[string]w3cMember
	// sessionErr is the reason Inbound.Extract refuses the session; nil when
	// it accepts it.
	sessionErr error
}

var w3cDefaultRename = map[string]string{"SomeKey": "session.chat_id", "SomeKey2": "session.thread_id"}

// The reference implementation percent-encodes with Python's
// urllib.parse.quote; these are test_parse_percent_encoded's value and
// quote(value).
const (
	w3cRawValue     = "\t \"';=asdf!@#$%^&*()"
	w3cEncodedValue = "%09%20%22%27%3B%3Dasdf%21%40%23%24%25%5E%26%2A%28%29"
)

func w3cCases() []w3cCase {
	someKeys := map[string]w3cMember{
		"SomeKey":  {Value: "SomeValue", Props: []string{"SomeProp"}},
		"SomeKey2": {Value: "SomeValue2", Props: []string{"ValueProp=PropVal"}},
	}
	kvProps := map[string]w3cMember{
		"SomeKey":  {Value: "SomeValue", Props: []string{"SomePropKey=SomePropValue"}},
		"SomeKey2": {Value: "SomeValue2", Props: []string{"SomePropKey2=SomePropValue2"}},
	}
	simple := map[string]w3cMember{"SomeKey": {Value: "SomeValue"}}
	headerExamples := map[string]string{
		"userId": "session.user_id", "serverNode": "session.scope_id",
		"key1": "session.platform", "key2": "session.chat_id", "key3": "session.message_id",
	}

	// LimitsTest.test_serialize_at_least_64: key0=value … key63=value.
	var at64 []string
	want64 := map[string]w3cMember{}
	for i := range 64 {
		at64 = append(at64, fmt.Sprintf("key%d=value", i))
		want64[fmt.Sprintf("key%d", i)] = w3cMember{Value: "value"}
	}

	// LimitsTest.test_serialize_long_entry: "a=" and 8190 digits, 8192 bytes.
	longValue := strings.Repeat("0123456789", 819)
	longEntry := "a=" + longValue
	// The same 8192 bytes with a session key: 8176 digits.
	longSession := "session.chat_id=" + longValue[:otelsession.MaxBaggageBytes-len("session.chat_id=")]

	// LimitsTest.test_serialize_many_entries: 512 members "000=0123456789a" …,
	// the last one "511=0123456789ab", 8192 bytes together.
	var many []string
	for i := range 512 {
		many = append(many, fmt.Sprintf("%03d=0123456789a", i))
	}
	many[511] += "b"
	wantFirst64 := map[string]w3cMember{}
	for i := range 64 {
		wantFirst64[fmt.Sprintf("%03d", i)] = w3cMember{Value: "0123456789a"}
	}
	// Session variants of the same size: a 15-byte session member first, or a
	// 16-byte one last.
	manySessionFirst := append([]string{"session.id=1234"}, many[1:]...)
	wantSessionFirst := map[string]w3cMember{"session.id": {Value: "1234"}}
	for i := 1; i < 64; i++ {
		wantSessionFirst[fmt.Sprintf("%03d", i)] = w3cMember{Value: "0123456789a"}
	}
	manySessionLast := append(append([]string(nil), many[:511]...), "session.id=12345")

	// HTTP_HEADER_FORMAT.md, Limits: 4096 bytes in each of two headers.
	half := func(key string, n int) string { return key + "=" + strings.Repeat("x", n-len(key)-1) }

	return []w3cCase{
		// test/test_baggage.py, class BaggageTest.
		{
			name:   "BaggageTest/test_parse_simple",
			header: []string{"SomeKey=SomeValue"},
			want:   simple,
		},
		{
			name:   "BaggageTest/test_parse_multiple",
			header: []string{"SomeKey=SomeValue;SomeProp,SomeKey2=SomeValue2;ValueProp=PropVal"},
			want:   someKeys,
		},
		{
			name: "BaggageTest/test_parse_multiple_ows",
			header: []string{"SomeKey \t = \t SomeValue \t ; \t SomeProp \t , \t SomeKey2 \t = \t SomeValue2 \t ; " +
				"\t ValueProp \t = \t PropVal"},
			want: someKeys,
			// otel-go keeps a property list as it arrived, OWS included
			// (valid: the grammar allows OWS there), and writes it back so.
			wantInjected: []string{"SomeKey=SomeValue; \t SomeProp \t ", "SomeKey2=SomeValue2; \t ValueProp \t = \t PropVal"},
		},
		{
			name:   "BaggageTest/test_parse_multiple_kv_property",
			header: []string{"SomeKey=SomeValue;SomePropKey=SomePropValue,SomeKey2=SomeValue2;SomePropKey2=SomePropValue2"},
			want:   kvProps,
		},
		{
			name: "BaggageTest/test_parse_multiple_kv_property_ows",
			header: []string{"SomeKey \t = \t SomeValue \t ; \t SomePropKey=SomePropValue \t , \t SomeKey2 \t = \t " +
				"SomeValue2 \t ; \t SomePropKey2 \t = \t SomePropValue2"},
			want: kvProps,
		},

		// test/test_baggage.py, class BaggageEntryTest.
		{
			name:   "BaggageEntryTest/test_parse_simple",
			header: []string{"SomeKey=SomeValue"},
			want:   simple,
		},
		{
			name:   "BaggageEntryTest/test_parse_multiple_equals",
			header: []string{"SomeKey=SomeValue=equals"},
			want:   map[string]w3cMember{"SomeKey": {Value: "SomeValue=equals"}},
		},
		{
			// The W3C case also expects quote()'s serialization, which
			// encodes every reserved character. otel-go encodes only what
			// baggage-octet excludes, and "%" ("Code points which are not
			// required to be percent-encoded MAY be percent-encoded"): both
			// forms decode to the same value.
			name:         "BaggageEntryTest/test_parse_percent_encoded",
			header:       []string{"SomeKey=" + w3cEncodedValue},
			want:         map[string]w3cMember{"SomeKey": {Value: w3cRawValue}},
			wantInjected: []string{"SomeKey=%09%20%22'%3B=asdf!@#$%25^&*()"},
			// The value starts with a tab: fine in baggage, not in an
			// identifier (Bind refuses it too).
			sessionErr: propagation.ErrInvalidValue,
		},
		{
			name:   "BaggageEntryTest/test_parse_property",
			header: []string{"SomeKey=SomeValue;SomeProp"},
			want:   map[string]w3cMember{"SomeKey": {Value: "SomeValue", Props: []string{"SomeProp"}}},
		},
		{
			name:   "BaggageEntryTest/test_parse_multi_property",
			header: []string{"SomeKey=SomeValue;SomeProp;SecondProp=PropValue"},
			want:   map[string]w3cMember{"SomeKey": {Value: "SomeValue", Props: []string{"SomeProp", "SecondProp=PropValue"}}},
		},
		{
			name:   "BaggageEntryTest/test_parse_multiple_properties_same_name",
			header: []string{"SomeKey=SomeValue;SomeProp;SomeProp=PropValue;SomeProp=AnotherPropValue"},
			want: map[string]w3cMember{"SomeKey": {Value: "SomeValue",
				Props: []string{"SomeProp", "SomeProp=PropValue", "SomeProp=AnotherPropValue"}}},
		},
		{
			name:   "BaggageEntryTest/test_parse_kv_property",
			header: []string{"SomeKey=SomeValue;SomePropKey=SomePropValue"},
			want:   map[string]w3cMember{"SomeKey": {Value: "SomeValue", Props: []string{"SomePropKey=SomePropValue"}}},
		},
		{
			name:   "BaggageEntryTest/test_parse_simple_ows",
			header: []string{"SomeKey \t = \t SomeValue \t "},
			want:   simple,
		},
		{
			name:       "BaggageEntryTest/test_parse_percent_encoded_ows",
			header:     []string{"SomeKey \t = \t " + w3cEncodedValue + " \t "},
			want:       map[string]w3cMember{"SomeKey": {Value: w3cRawValue}},
			sessionErr: propagation.ErrInvalidValue, // a tab, as above
		},
		{
			name:   "BaggageEntryTest/test_parse_property_ows",
			header: []string{"SomeKey \t = \t SomeValue \t ; \t SomeProp"},
			want:   map[string]w3cMember{"SomeKey": {Value: "SomeValue", Props: []string{"SomeProp"}}},
		},
		{
			name:   "BaggageEntryTest/test_parse_multi_property_ows",
			header: []string{"SomeKey \t = \t SomeValue \t ; \t SomeProp \t ; \t SecondProp \t = \t PropValue"},
			want:   map[string]w3cMember{"SomeKey": {Value: "SomeValue", Props: []string{"SomeProp", "SecondProp=PropValue"}}},
		},
		{
			name:   "BaggageEntryTest/test_parse_kv_property_ows",
			header: []string{"SomeKey \t = \t SomeValue \t ; \t SomePropKey \t = \t SomePropValue"},
			want:   map[string]w3cMember{"SomeKey": {Value: "SomeValue", Props: []string{"SomePropKey=SomePropValue"}}},
		},
		{
			// Here otel-go writes exactly the serialization the W3C case
			// expects: it keeps property text as it arrived.
			name:         "BaggageEntryTest/test_parse_percent_encoded_property",
			header:       []string{"SomeKey=SomeValue;SomePropKey=" + w3cEncodedValue},
			want:         map[string]w3cMember{"SomeKey": {Value: "SomeValue", Props: []string{"SomePropKey=" + w3cRawValue}}},
			wantInjected: []string{"SomeKey=SomeValue;SomePropKey=" + w3cEncodedValue},
		},
		{
			name:   "BaggageEntryTest/test_parse_property_without_value_no_percent_decoding",
			header: []string{"SomeKey=SomeValue;ValueProp%20%09%20%3D%20%09%20PropVal"},
			want: map[string]w3cMember{"SomeKey": {Value: "SomeValue",
				Props: []string{"ValueProp%20%09%20%3D%20%09%20PropVal"}}},
		},

		// test/test_baggage.py, class LimitsTest. The W3C cases serialize;
		// here the same strings are parsed, then re-injected.
		{
			name:   "LimitsTest/test_serialize_at_least_64",
			header: []string{strings.Join(at64, ",")},
			want:   want64,
			rename: map[string]string{"key0": "session.chat_id", "key1": "session.thread_id"},
		},
		{
			// 8192 bytes is within the W3C limit and otel-go keeps it, but a
			// session value is bounded far lower (MaxValueBytes, 512): no
			// identifier is that long, and a chat id that is would only be
			// a way to crowd out the application's baggage.
			name:         "LimitsTest/test_serialize_long_entry",
			headerBytes:  8192,
			header:       []string{longEntry},
			want:         map[string]w3cMember{"a": {Value: longValue}},
			wantInjected: []string{longEntry},
			session:      []string{longSession},
			sessionWant:  map[string]w3cMember{"session.chat_id": {Value: longSession[len("session.chat_id="):]}},
			sessionErr:   propagation.ErrInvalidValue,
		},
		{
			// One byte over: otel-go drops the whole header ("MAY drop
			// list-members"), and Inbound names the reason.
			name:        "LimitsTest/test_serialize_long_entry/one_byte_over",
			headerBytes: 8193,
			header:      []string{longEntry + "0"},
			session:     []string{longSession + "0"},
			sessionErr:  propagation.ErrBaggageTooLarge,
		},
		{
			// 512 members in 8192 bytes. otel-go keeps the first 64, its
			// member limit, which the W3C text allows ("MAY drop
			// list-members until both conditions are met"). Which members
			// survive depends on the parser (over several headers otel-go
			// drops at random), so Inbound refuses a session that arrives
			// beside more than 64 members, wherever it stands.
			name:        "LimitsTest/test_serialize_many_entries/session_member_first",
			headerBytes: 8192,
			header:      []string{strings.Join(many, ",")},
			want:        wantFirst64,
			session:     []string{strings.Join(manySessionFirst, ",")},
			sessionWant: wantSessionFirst,
			sessionErr:  propagation.ErrBaggageTooLarge,
		},
		{
			name:        "LimitsTest/test_serialize_many_entries/session_member_last",
			headerBytes: 8192,
			header:      []string{strings.Join(many, ",")},
			want:        wantFirst64,
			session:     []string{strings.Join(manySessionLast, ",")},
			sessionWant: wantFirst64,
			sessionErr:  propagation.ErrBaggageTooLarge,
		},

		// test/baggage/baggage.py: what the reference grammar refuses.
		{
			name:       "baggage.py/value_with_whitespace",
			header:     []string{"SomeKey=Some Value,SomeKey2=SomeValue2"},
			want:       map[string]w3cMember{"SomeKey2": {Value: "SomeValue2"}},
			sessionErr: propagation.ErrMalformedMember,
		},
		{
			name:       "baggage.py/value_with_dquote",
			header:     []string{`SomeKey="SomeValue",SomeKey2=SomeValue2`},
			want:       map[string]w3cMember{"SomeKey2": {Value: "SomeValue2"}},
			sessionErr: propagation.ErrMalformedMember,
		},
		{
			name:       "baggage.py/value_with_backslash",
			header:     []string{`SomeKey=Some\Value,SomeKey2=SomeValue2`},
			want:       map[string]w3cMember{"SomeKey2": {Value: "SomeValue2"}},
			sessionErr: propagation.ErrMalformedMember,
		},
		{
			name:       "baggage.py/value_not_ascii",
			header:     []string{"SomeKey=Amélie,SomeKey2=SomeValue2"},
			want:       map[string]w3cMember{"SomeKey2": {Value: "SomeValue2"}},
			sessionErr: propagation.ErrMalformedMember,
		},
		{
			name:       "baggage.py/member_without_equals",
			header:     []string{"SomeKey,SomeKey2=SomeValue2"},
			want:       map[string]w3cMember{"SomeKey2": {Value: "SomeValue2"}},
			sessionErr: propagation.ErrMalformedMember,
		},
		{
			name:       "baggage.py/property_not_a_token",
			header:     []string{"SomeKey=SomeValue;Some Prop,SomeKey2=SomeValue2"},
			want:       map[string]w3cMember{"SomeKey2": {Value: "SomeValue2"}},
			sessionErr: propagation.ErrMalformedMember,
		},
		{
			// Python's unquote leaves a bad escape as it is; otel-go (like
			// the JavaScript SDK) drops the member. The W3C text does not
			// say; a session member is refused either way.
			name:       "baggage.py/percent_escape_not_hex",
			header:     []string{"SomeKey=%zz,SomeKey2=SomeValue2"},
			want:       map[string]w3cMember{"SomeKey2": {Value: "SomeValue2"}},
			sessionErr: propagation.ErrMalformedMember,
		},
		{
			// An invalid member that is not a session member does not refuse
			// the session: only session members are sessionwire's business.
			name:   "baggage.py/key_not_a_token",
			header: []string{"Some(Key=SomeValue,SomeKey2=SomeValue2"},
			want:   map[string]w3cMember{"SomeKey2": {Value: "SomeValue2"}},
		},
		{
			name:   "baggage.py/empty_key",
			header: []string{"=SomeValue,SomeKey2=SomeValue2"},
			want:   map[string]w3cMember{"SomeKey2": {Value: "SomeValue2"}},
		},
		{
			name:   "baggage.py/empty_list_member",
			header: []string{"SomeKey=SomeValue,,SomeKey2=SomeValue2"},
			want:   map[string]w3cMember{"SomeKey": {Value: "SomeValue"}, "SomeKey2": {Value: "SomeValue2"}},
		},

		// baggage/HTTP_HEADER_FORMAT.md.
		{
			name:        "HTTP_HEADER_FORMAT/Example",
			headerBytes: 86,
			header:      []string{"key1=value1;property1;property2, key2 = value2, key3=value3; propertyKey=propertyValue"},
			want: map[string]w3cMember{
				"key1": {Value: "value1", Props: []string{"property1", "property2"}},
				"key2": {Value: "value2"},
				"key3": {Value: "value3", Props: []string{"propertyKey=propertyValue"}},
			},
			rename: headerExamples,
		},
		{
			name:   "HTTP_HEADER_FORMAT/Examples/single_header",
			header: []string{"userId=alice,serverNode=DF%2028,isProduction=false"},
			want: map[string]w3cMember{
				"userId": {Value: "alice"}, "serverNode": {Value: "DF 28"}, "isProduction": {Value: "false"},
			},
			wantInjected: []string{"userId=alice", "serverNode=DF%2028", "isProduction=false"},
			rename:       headerExamples,
		},
		{
			name:   "HTTP_HEADER_FORMAT/Examples/percent_encoded",
			header: []string{"userId=Am%C3%A9lie,serverNode=DF%2028,isProduction=false"},
			want: map[string]w3cMember{
				"userId": {Value: "Amélie"}, "serverNode": {Value: "DF 28"}, "isProduction": {Value: "false"},
			},
			rename: headerExamples,
		},
		{
			name:   "HTTP_HEADER_FORMAT/Examples/multiple_headers",
			header: []string{"userId=alice", "serverNode=DF%2028,isProduction=false"},
			want: map[string]w3cMember{
				"userId": {Value: "alice"}, "serverNode": {Value: "DF 28"}, "isProduction": {Value: "false"},
			},
			rename: headerExamples,
		},
		{
			name:   "HTTP_HEADER_FORMAT/Examples/names_and_values_with_spaces",
			header: []string{"userId =   alice", "serverNode = DF%2028, isProduction = false"},
			want: map[string]w3cMember{
				"userId": {Value: "alice"}, "serverNode": {Value: "DF 28"}, "isProduction": {Value: "false"},
			},
			rename: headerExamples,
		},
		{
			// "value = *baggage-octet": an empty value is valid. For a
			// session member it means Cleared (sessionwire itself writes
			// %00, which survives SDKs that drop empty members).
			name:   "HTTP_HEADER_FORMAT/value/empty",
			header: []string{"SomeKey="},
			want:   map[string]w3cMember{"SomeKey": {Value: ""}},
		},
		{
			// "percent-encoded octet sequences that do not match the UTF-8
			// encoding scheme MUST be replaced with U+FFFD": otel-go does.
			// An identifier holding U+FFFD is not what its sender meant, so
			// Inbound refuses it.
			name:       "HTTP_HEADER_FORMAT/value/invalid_utf8_replaced",
			header:     []string{"SomeKey=%FF"},
			want:       map[string]w3cMember{"SomeKey": {Value: "\uFFFD"}},
			sessionErr: propagation.ErrInvalidValue,
		},
		{
			// "Uniqueness of keys … is not guaranteed"; deduplicating MAY
			// keep the first or the last. otel-go keeps the last. Two values
			// for one session field leave no way to know the truth:
			// Inbound refuses.
			name:       "HTTP_HEADER_FORMAT/baggage-string/duplicate_keys",
			header:     []string{"SomeKey=first,SomeKey=last"},
			want:       map[string]w3cMember{"SomeKey": {Value: "last"}},
			sessionErr: propagation.ErrDuplicateMember,
		},
		{
			name:       "HTTP_HEADER_FORMAT/baggage-string/duplicate_keys_across_headers",
			header:     []string{"SomeKey=first", "SomeKey=last"},
			want:       map[string]w3cMember{"SomeKey": {Value: "last"}},
			sessionErr: propagation.ErrDuplicateMember,
		},
		{
			// "all limits apply to the combination of all baggage headers":
			// 4096 + "," + 4096 bytes is one over.
			name:        "HTTP_HEADER_FORMAT/Limits/headers_together_over_8192",
			headerBytes: 8193,
			header:      []string{half("SomeKey", 4096), half("other", 4096)},
			session:     []string{half("session.chat_id", 4096), half("other", 4096)},
			sessionErr:  propagation.ErrBaggageTooLarge,
		},
		{
			name:        "HTTP_HEADER_FORMAT/Limits/headers_together_at_8192",
			headerBytes: 8192,
			header:      []string{half("SomeKey", 4096), half("other", 4095)},
			want: map[string]w3cMember{
				"SomeKey": {Value: strings.Repeat("x", 4096-len("SomeKey="))},
				"other":   {Value: strings.Repeat("x", 4095-len("other="))},
			},
			// The session value is then over MaxValueBytes.
			session: []string{half("session.chat_id", 4096), half("other", 4095)},
			sessionWant: map[string]w3cMember{
				"session.chat_id": {Value: strings.Repeat("x", 4096-len("session.chat_id="))},
				"other":           {Value: strings.Repeat("x", 4095-len("other="))},
			},
			sessionErr: propagation.ErrInvalidValue,
		},
	}
}

func TestW3CBaggageCases(t *testing.T) {
	t.Parallel()
	for _, tc := range w3cCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.headerBytes != 0 {
				require.Len(t, strings.Join(tc.header, ","), tc.headerBytes, "the W3C case's header size")
			}
			for _, kind := range w3cCarrierKinds(tc.header) {
				t.Run(kind, func(t *testing.T) {
					t.Run("stock", func(t *testing.T) { checkW3CStock(t, tc, kind) })
					t.Run("inbound", func(t *testing.T) { checkW3CInbound(t, tc, kind) })
				})
			}
		})
	}
}

// w3cCarrierKinds lists the carriers a case runs through: otel-go extracts a
// HeaderCarrier (several header lines) and a MapCarrier (one) on two code
// paths, so a one-line case runs through both.
func w3cCarrierKinds(lines []string) []string {
	if len(lines) == 1 {
		return []string{"HeaderCarrier", "MapCarrier"}
	}
	return []string{"HeaderCarrier"}
}

func w3cCarrier(kind string, lines []string) otelprop.TextMapCarrier {
	if kind == "MapCarrier" {
		return otelprop.MapCarrier{"baggage": lines[0]}
	}
	h := http.Header{}
	for _, l := range lines {
		h.Add("baggage", l)
	}
	return otelprop.HeaderCarrier(h)
}

func checkW3CStock(t *testing.T, tc w3cCase, kind string) {
	ctx := otelprop.Baggage{}.Extract(context.Background(), w3cCarrier(kind, tc.header))
	got := w3cMembers(baggage.FromContext(ctx))
	assert.Equal(t, w3cOrEmpty(tc.want), got)

	// What a Go service forwards: the same members, nothing lost.
	out := otelprop.MapCarrier{}
	otelprop.Baggage{}.Inject(ctx, out)
	if tc.wantInjected != nil {
		// Commas are always percent-encoded inside values and properties.
		assert.ElementsMatch(t, tc.wantInjected, strings.Split(out.Get("baggage"), ","))
	}
	again := otelprop.Baggage{}.Extract(context.Background(), out)
	assert.Equal(t, got, w3cMembers(baggage.FromContext(again)), "re-injected as %q", out.Get("baggage"))
}

func checkW3CInbound(t *testing.T, tc w3cCase, kind string) {
	rename := tc.rename
	if rename == nil {
		rename = w3cDefaultRename
	}
	lines, want := tc.session, tc.sessionWant
	if lines == nil {
		lines = w3cRenameHeader(tc.header, rename)
	}
	if want == nil && tc.session == nil {
		want = w3cRenameMembers(tc.want, rename)
	}
	require.True(t, w3cHasSessionKey(lines), "the session variant of %s holds no session key", tc.name)

	policy := propagation.NewInbound(propagation.TrustAll)
	ctx, err := policy.Extract(context.Background(), otelprop.Baggage{}, w3cCarrier(kind, lines),
		propagation.Peer{Transport: "test"})
	counts := policy.Counts()

	if tc.sessionErr != nil {
		require.ErrorIs(t, err, tc.sessionErr)
		assert.Equal(t, uint64(1), counts.Rejected)
		assert.Zero(t, counts.Accepted)
		for _, f := range otelsession.Fields() {
			_, state := otelsession.Lookup(ctx, f)
			assert.Equal(t, otelsession.Unset, state, "%s of a refused session", f.Key())
		}
		// Other members pass as the stock propagator left them.
		assert.Equal(t, w3cWithoutSession(w3cOrEmpty(want)), w3cMembers(baggage.FromContext(ctx)))
		return
	}

	require.NoError(t, err)
	assert.Equal(t, uint64(1), counts.Accepted)
	assert.Zero(t, counts.Rejected)
	for _, f := range otelsession.Fields() {
		value, state := otelsession.Lookup(ctx, f)
		m, ok := want[f.Key()]
		switch {
		case !ok:
			assert.Equal(t, otelsession.Unset, state, f.Key())
		case m.Value == "":
			assert.Equal(t, otelsession.Cleared, state, f.Key())
		default:
			assert.Equal(t, otelsession.Set, state, f.Key())
			assert.Equal(t, m.Value, value, f.Key())
		}
	}
	assert.Equal(t, w3cOrEmpty(want), w3cMembers(baggage.FromContext(ctx)))
}

func w3cMembers(b baggage.Baggage) map[string]w3cMember {
	out := map[string]w3cMember{}
	for _, m := range b.Members() {
		var props []string
		for _, p := range m.Properties() {
			if v, ok := p.Value(); ok {
				props = append(props, p.Key()+"="+v)
			} else {
				props = append(props, p.Key())
			}
		}
		out[m.Key()] = w3cMember{Value: m.Value(), Props: props}
	}
	return out
}

func w3cOrEmpty(m map[string]w3cMember) map[string]w3cMember {
	if m == nil {
		return map[string]w3cMember{}
	}
	return m
}

func w3cIsSessionKey(key string) bool {
	_, ok := otelsession.FieldByKey(key)
	return ok || key == otelsession.AsyncDeliveryKey
}

func w3cHasSessionKey(lines []string) bool {
	for _, l := range lines {
		if strings.Contains(l, otelsession.KeyPrefix) {
			return true
		}
	}
	return false
}

func w3cWithoutSession(m map[string]w3cMember) map[string]w3cMember {
	out := map[string]w3cMember{}
	for k, v := range m {
		if !w3cIsSessionKey(k) {
			out[k] = v
		}
	}
	return out
}

func w3cRenameMembers(m map[string]w3cMember, rename map[string]string) map[string]w3cMember {
	if m == nil {
		return nil
	}
	out := map[string]w3cMember{}
	for k, v := range m {
		if nk, ok := rename[k]; ok {
			k = nk
		}
		out[k] = v
	}
	return out
}

// w3cRenameHeader renames list-member keys (not property keys, not values),
// keeping the case's whitespace where it was.
func w3cRenameHeader(lines []string, rename map[string]string) []string {
	out := make([]string, len(lines))
	for i, line := range lines {
		parts := strings.Split(line, ",")
		for j, p := range parts {
			end := strings.IndexAny(p, "=;")
			if end < 0 {
				end = len(p)
			}
			if nk, ok := rename[strings.TrimSpace(p[:end])]; ok {
				parts[j] = strings.Replace(p[:end], strings.TrimSpace(p[:end]), nk, 1) + p[end:]
			}
		}
		out[i] = strings.Join(parts, ",")
	}
	return out
}
