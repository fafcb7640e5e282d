package propagation_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// sameBaggage fails t unless a and b hold the same members: keys, values,
// properties and their encoding, as every reader of a baggage can tell.
func sameBaggage(t *testing.T, want, got baggage.Baggage) {
	t.Helper()
	require.Equal(t, want.Len(), got.Len(), "members")
	for _, m := range want.Members() {
		g := got.Member(m.Key())
		require.Equal(t, m.Key(), g.Key(), "key %q", m.Key())
		assert.Equal(t, m.Value(), g.Value(), "value of %q", m.Key())
		assert.Equal(t, len(m.Properties()), len(g.Properties()), "properties of %q", m.Key())
		assert.Equal(t, m.String(), g.String(), "encoding of %q", m.Key())
	}
	enc := func(b baggage.Baggage) []string {
		s := strings.Split(b.String(), ",")
		slices.Sort(s)
		return s
	}
	assert.Equal(t, enc(want), enc(got), "encoded baggage")
}

// FuzzSimpleLineIsTheParsersBaggage holds simpleBaggage to OpenTelemetry's
// parser: whatever line it builds a baggage for, the parser parses whole,
// without an error, into the same baggage.
func FuzzSimpleLineIsTheParsersBaggage(f *testing.F) {
	for _, seed := range []string{
		"a=1",
		"a=1,b=2",
		"a=",
		"a==b",
		"a=1,a=2",
		"a=1,,b=2",
		"a=1,",
		",a=1",
		"a=1;p",
		"a=1 ,b=2",
		" a=1",
		"a=%41",
		"a=%20%e2%80%93",
		"a=%ff",
		"a=%",
		"a=" + strings.Repeat("%ff", 2730) + ",a=b",
		"a=\xff",
		"a=b\"c",
		"%=1",
		"a b=1",
		"=1",
		"a",
		manyMembers(64, "k%d=v"),
		manyMembers(65, "k%d=v"),
		"k=" + strings.Repeat("v", otelsession.MaxBaggageBytes-2),
		"k=" + strings.Repeat("v", otelsession.MaxBaggageBytes-1),
		sessionHeaderOf(fullTestSession),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		b, ok := propagation.SimpleBaggage(line)
		if !ok {
			assert.Zero(t, b.Len(), "a line that is not simple builds no baggage")
			return
		}
		want, err := baggage.Parse(line)
		require.NoError(t, err, "the parser refuses a line simpleBaggage built a baggage for")
		sameBaggage(t, want, b)
	})
}

func TestSimpleLines(t *testing.T) {
	for _, tc := range []struct {
		line  string
		plain bool
	}{
		{sessionHeaderOf(fullTestSession), true},
		{"a=1,b=2", true},
		{"a=1,a=2", true}, // the last wins, in the parser and in baggage.New
		{"a=", true},
		{"a==", true},
		{manyMembers(otelsession.MaxBaggageMembers, "k%d=v"), true},
		{"k=" + strings.Repeat("v", otelsession.MaxBaggageBytes-2), true},

		{"", false},
		{manyMembers(otelsession.MaxBaggageMembers+1, "k%d=v"), false},
		{"k=" + strings.Repeat("v", otelsession.MaxBaggageBytes-1), false},
		{"a=%20", true},
		{"a=%41%c3%a9", true},
		{"a=%", false},
		{"a=%4", false},
		{"a=%zz", false},
		{"a=%ff", false},   // not UTF-8: the parser replaces it
		{"a=1;p=2", false}, // properties
		{"a=1, b=2", false},
		{"a=1 ", false},
		{"a=1,,b=2", false}, // an empty member is an error of the parser's
		{"a=1,", false},
		{"a", false},
		{"=1", false},
		{"a b=1", false},
		{"a=\xff", false},
		// Past a handful of members.
		{manyMembers(12, "k%d=v") + ",a=%41%c3%a9", true},
		{manyMembers(12, "k%d=v") + ",a=%ff", false},
		{manyMembers(12, "k%d=v") + ",a=1;p=2", false},
		{manyMembers(12, "k%d=v") + ",", false},
	} {
		b, ok := propagation.SimpleBaggage(tc.line)
		assert.Equal(t, tc.plain, ok, "%.60q", tc.line)
		if ok {
			want, err := baggage.Parse(tc.line)
			require.NoError(t, err)
			sameBaggage(t, want, b)
		}
	}
}

// TestExtractLineIsTheStockExtraction: for a plain line and for any other,
// extractLine's context holds what resetAndExtract's does: the same
// baggage, the same remote span context, the context's own session Reset
// and its other values kept.
func TestExtractLineIsTheStockExtraction(t *testing.T) {
	type key struct{}
	parent := otelsession.Bind(context.WithValue(context.Background(), key{}, "kept"), fullTestSession)
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.Baggage{}, otelprop.TraceContext{})
	for _, line := range []string{
		sessionHeaderOf(fullTestSession) + ",app.tenant=acme",
		"app.tenant=acme",
		"app.tenant=a%20b;p=1",
		"",
	} {
		carrier := otelprop.MapCarrier{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
		if line != "" {
			carrier["baggage"] = line
		}
		want := propagation.ResetAndExtract(parent, prop, carrier)
		got := propagation.ExtractLine(parent, prop, carrier, line)
		sameBaggage(t, baggage.FromContext(want), baggage.FromContext(got))
		assert.Equal(t, trace.SpanContextFromContext(want), trace.SpanContextFromContext(got))
		assert.True(t, trace.SpanContextFromContext(got).IsRemote())
		assert.Equal(t, "kept", got.Value(key{}))
		for _, f := range otelsession.Fields() {
			wv, wok := otelsession.Lookup(want, f)
			gv, gok := otelsession.Lookup(got, f)
			assert.Equal(t, wv, gv, "%s", f)
			assert.Equal(t, wok, gok, "%s", f)
		}
	}
}

// BenchmarkSimpleLine is a line made into a baggage by simpleBaggage, beside
// OpenTelemetry's parse of it: a full session's, and the application's own
// three members, where the parse costs less (PERFORMANCE.md, stop 38).
func BenchmarkSimpleLine(b *testing.B) {
	for _, c := range []struct{ name, line string }{
		{"session", sessionHeaderOf(fullTestSession)},
		{"application", "app.tenant=t-42,app.plan=pro,app.region=eu-west-1"},
	} {
		b.Run(c.name, func(b *testing.B) { benchSimpleLine(b, c.line) })
	}
}

func benchSimpleLine(b *testing.B, line string) {
	b.Run("baggage.Parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if bg, err := baggage.Parse(line); err != nil || bg.Len() == 0 {
				b.Fatal(bg.Len(), err)
			}
		}
	})
	b.Run("simpleBaggage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if bg, ok := propagation.SimpleBaggage(line); !ok || bg.Len() == 0 {
				b.Fatal(bg.Len(), ok)
			}
		}
	})
}
