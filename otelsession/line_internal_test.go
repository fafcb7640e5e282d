package otelsession

import (
	"context"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/baggage"
)

// membersOf returns b's members as OpenTelemetry encodes each, sorted.
func membersOf(b baggage.Baggage) []string {
	var ms []string
	for _, m := range b.Members() {
		ms = append(ms, m.String())
	}
	slices.Sort(ms)
	return ms
}

// lineMembers returns line's members as written, sorted.
func lineMembers(line string) []string {
	ms := strings.Split(line, ",")
	slices.Sort(ms)
	return ms
}

// checkWireLine holds wireLine of ctx to Baggage.String: the same members,
// each encoded as OpenTelemetry encodes it, when it answers.
func checkWireLine(t *testing.T, name string, ctx context.Context, wantOK bool) {
	t.Helper()
	b := baggage.FromContext(ctx)
	line, ok := wireLine(ctx, b)
	if ok != wantOK {
		t.Fatalf("%s: wireLine answers %v, want %v (baggage %q)", name, ok, wantOK, b.String())
	}
	if !ok {
		return
	}
	if got, want := lineMembers(line), lineMembers(b.String()); !slices.Equal(got, want) {
		t.Fatalf("%s: wireLine wrote\n%q\nOpenTelemetry writes\n%q", name, got, want)
	}
	parsed, err := baggage.Parse(line)
	if err != nil || !slices.Equal(membersOf(parsed), membersOf(b)) {
		t.Fatalf("%s: the line parses to %q (%v), the baggage holds %q", name, membersOf(parsed), err, membersOf(b))
	}
}

// TestWireLineIsTheBaggagesString walks through the contexts the writers
// return (a session bound, bound again from the cache for its next
// message, fields set, Cleared and Unset, the async capability, a cron
// job, Reset, the application's members kept beside the session) and the
// ones wireLine must leave to the propagator: a member the application set
// after the writer, a baggage rebuilt by hand with the same members, one an
// inbound policy would accept (no local state).
func TestWireLineIsTheBaggagesString(t *testing.T) {
	full := Session{
		Platform: "telegram", Source: "gateway", ChatID: "-1001234567890", ChatType: "group",
		ChatName: "Ops, night shift; 100% «on call»", ThreadID: "17585", UserID: "5512345678",
		UserName: "Alice Example", SessionKey: "agent:main:telegram:group:-1001234567890:17585",
		MessageID: "88121", Profile: "default", Cron: CronOff, Stateless: true,
	}
	bg := context.Background()
	ctx := Bind(bg, full)
	checkWireLine(t, "a full session", ctx, true)
	next := full
	next.MessageID = "88122"
	Bind(bg, next) // makes the cache's entry derive
	next.MessageID = "88123"
	checkWireLine(t, "the next message, from the bind cache", Bind(bg, next), true)
	checkWireLine(t, "a session with a field Cleared by With", With(ctx, FieldThreadID, ""), true)
	checkWireLine(t, "Clear", Clear(ctx), true)
	checkWireLine(t, "a cron job", WithCronJob(ctx, CronJob{ID: "job-7", OriginPlatform: "telegram", OriginUserID: "5512345678"}), true)
	// DeclareStatelessChannel over a context without session state makes
	// no local state, so no record: the propagator writes it.
	checkWireLine(t, "the stateless capability alone", DeclareStatelessChannel(bg), false)
	checkWireLine(t, "the stateless capability beside a session", DeclareStatelessChannel(With(ctx, FieldUserID, "")), true)
	checkWireLine(t, "Bind of an empty session", Bind(bg, Session{}), true)
	checkWireLine(t, "Reset of a session", Reset(ctx), false) // no member left

	// The application's members the writers keep beside the session: plain,
	// escaped, with properties (set through the API and parsed from a
	// line); and one that had to be dropped to fit the W3C limits.
	app, _ := baggage.NewMemberRaw("app.tenant", "acme")
	escaped, _ := baggage.NewMemberRaw("app.note", "a b,c;d=«e» 100%")
	prop, _ := baggage.NewKeyProperty("sampled")
	propVal, _ := baggage.NewKeyValuePropertyRaw("ttl", "30 s")
	withProps, _ := baggage.NewMemberRaw("app.flags", "x", prop, propVal)
	withApp, _ := baggage.New(app, escaped, withProps)
	appCtx := baggage.ContextWithBaggage(bg, withApp)
	parsedApp, err := baggage.Parse("app.a=1;p1;p2=v%202,app.b=%C2%AB2%C2%BB ; q")
	if err != nil {
		t.Fatal(err)
	}
	bound := Bind(appCtx, full)
	checkWireLine(t, "the application's members beside the session", bound, true)
	checkWireLine(t, "members parsed from a line, with properties, beside the session",
		Bind(baggage.ContextWithBaggage(bg, parsedApp), full), true)
	checkWireLine(t, "With over a session beside the application's members", With(bound, FieldThreadID, "9"), true)
	checkWireLine(t, "the stateless capability beside the application's members", DeclareStatelessChannel(bound), true)
	checkWireLine(t, "Reset leaving the application's members", Reset(bound), true)
	checkWireLine(t, "Clear beside the application's members", Clear(bound), true)
	big, _ := baggage.NewMemberRaw("app.big", strings.Repeat("x", MaxBaggageBytes-100))
	withBig, _ := baggage.New(app, big)
	dropped := Bind(baggage.ContextWithBaggage(bg, withBig), full)
	if got := baggage.FromContext(dropped); got.Member("app.big").Key() != "" || got.Member("app.tenant").Value() != "acme" {
		t.Fatalf("the writer was to drop app.big alone to fit the limits: %d members, app.tenant %q", got.Len(), got.Member("app.tenant").Value())
	}
	// A writer that had to drop a member reports it and records nothing.
	checkWireLine(t, "an application member dropped to fit the limits", dropped, false)
	more, _ := baggage.NewMemberRaw("app.later", "1")
	later, _ := baggage.FromContext(bound).SetMember(more)
	checkWireLine(t, "a member the application set after the writer", baggage.ContextWithBaggage(bound, later), false)
	rebuilt, _ := baggage.New(baggage.FromContext(ctx).Members()...)
	checkWireLine(t, "the same members in a baggage built by hand", baggage.ContextWithBaggage(ctx, rebuilt), false)
	parsed, _ := baggage.Parse(baggage.FromContext(ctx).String())
	checkWireLine(t, "the same line parsed, no local state", baggage.ContextWithBaggage(bg, parsed), false)
}

// TestValueEscapesAreOpenTelemetrys holds appendMember to Member.String for
// every byte OpenTelemetry accepts in a value, alone and between others.
func TestValueEscapesAreOpenTelemetrys(t *testing.T) {
	for r := range rune(0x800) {
		for _, v := range []string{string(r), "a" + string(r) + "b", strings.Repeat(string(r), 3)} {
			checkMemberEncoding(t, v)
		}
	}
}

// FuzzWireLineMember holds appendMember to Member.String for any value
// OpenTelemetry accepts.
func FuzzWireLineMember(f *testing.F) {
	for _, s := range []string{"", "a b", "100%", "«»", "\x00", "a,b;c=d", "\xff", "日本語", "\"quoted\"\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if utf8.ValidString(v) {
			checkMemberEncoding(t, v)
		}
	})
}

func checkMemberEncoding(t *testing.T, v string) {
	t.Helper()
	m, err := baggage.NewMemberRaw("k", v)
	if err != nil {
		return
	}
	if got, want := string(appendMember(nil, "k", v)), m.String(); got != want {
		t.Fatalf("%q: written %q, OpenTelemetry writes %q", v, got, want)
	}
	if escapedLen(v) != len(m.String())-len("k=") {
		t.Fatalf("%q: escapedLen %d, OpenTelemetry writes %d bytes", v, escapedLen(v), len(m.String())-2)
	}
}

// BenchmarkWireLine: a full session's line written from its record, beside
// OpenTelemetry's Baggage.String of the same baggage.
//
//	go test ./otelsession -run '^$' -bench '^BenchmarkWireLine$' -count 6
func BenchmarkWireLine(b *testing.B) {
	ctx := Bind(context.Background(), Session{
		Platform: "telegram", Source: "gateway", ChatID: "-1001234567890", ChatType: "group",
		ChatName: "Ops — night shift", ThreadID: "17585", UserID: "5512345678", UserIDAlt: "@alice",
		UserName: "Alice Example", ScopeID: "guild-998877", SessionKey: "agent:main:telegram:group:-1001234567890:17585",
		SessionID: "20261202_152133_a1b2c3", MessageID: "88121", Profile: "default", ParentChatID: "-1001234567000", Cron: CronOff,
	})
	bag := baggage.FromContext(ctx)
	var sink string
	b.Run("wireLine", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink, _ = wireLine(ctx, bag)
		}
	})
	b.Run("baseline/Baggage.String", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = bag.String()
		}
	})
	_ = sink
}
