package propagation_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// trustNamed trusts the peers named "trusted" only, so that one policy sees
// both outcomes.
func trustNamed(_ context.Context, p propagation.Peer) bool { return p.Name == "trusted" }

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// extractLine extracts line as the one baggage entry of a carrier beside a
// traceparent, through a MapCarrier or a single-valued http.Header.
func extractLine(p *propagation.Inbound, base context.Context, line string, header, trusted bool) (context.Context, error) {
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	peer := propagation.Peer{Transport: "test", Name: "untrusted"}
	if trusted {
		peer.Name = "trusted"
	}
	var c otelprop.TextMapCarrier = otelprop.MapCarrier{"baggage": line, "traceparent": testTraceparent}
	if header {
		c = otelprop.HeaderCarrier(http.Header{"Baggage": {line}, "Traceparent": {testTraceparent}})
	}
	return p.Extract(base, prop, c, peer)
}

// outcome is everything a caller can observe of one extraction.
type outcome struct {
	err     string
	members []string // the baggage's members, sorted
	reads   map[otelsession.Field]fieldSeen
	atop    bool
	span    trace.SpanContext
}

func outcomeOf(ctx context.Context, err error) outcome {
	o := outcome{reads: sessionSeen(ctx), span: trace.SpanContextFromContext(ctx)}
	if err != nil {
		o.err = err.Error()
	}
	b := baggage.FromContext(ctx)
	for _, m := range b.Members() {
		o.members = append(o.members, m.String())
	}
	slices.Sort(o.members)
	o.atop = sessionstate.Atop(ctx, b)
	return o
}

func (o outcome) equal(p outcome) bool {
	return o.err == p.err && slices.Equal(o.members, p.members) && maps.Equal(o.reads, p.reads) &&
		o.atop == p.atop && o.span.Equal(p.span)
}

// withMessageID returns line with the value of its message id member
// replaced by v.
func withMessageID(t testing.TB, line, v string) string {
	return withValue(t, line, otelsession.KeyPrefix+"message_id", v)
}

// withValue returns line with the value of its member key replaced by v.
func withValue(t testing.TB, line, key, v string) string {
	t.Helper()
	i := strings.Index(line, key+"=")
	if i < 0 {
		t.Fatalf("no %s in %q", key, line)
	}
	i += len(key) + 1
	j := strings.IndexByte(line[i:], ',')
	if j < 0 {
		j = len(line) - i
	}
	return line[:i] + v + line[i+j:]
}

// FuzzInboundCache holds an extraction the cache of accepted sessions may
// serve to the same extraction by a policy without the cache: a policy
// accepts first twice (making an entry of it, when it may), then extracts
// second, from a peer it trusts or not, into a context that holds a
// session of its own or none; whatever the two lines, the context and
// error it returns are the uncached policy's (the baggage's members, every
// read, the record on top, the trace context) and so are its counts; and an
// outbound policy sends its session on as it sends the same members
// rebuilt by hand.
func FuzzInboundCache(f *testing.F) {
	full := sessionHeaderOf(fullTestSession)
	for _, second := range []string{
		full,
		withMessageID(f, full, "88122"),
		withMessageID(f, full, "1"),
		withMessageID(f, full, "88122 "),
		withMessageID(f, full, " 88122"),
		withMessageID(f, full, ""),
		withMessageID(f, full, "%41"),
		withMessageID(f, full, "a b"),
		withMessageID(f, full, "x;p=1"),
		withMessageID(f, full, strings.Repeat("9", 300)),
		withMessageID(f, full, "88122,session.message_id=3"),
		withMessageID(f, full, "88122,session.cwd=/"),
		withMessageID(f, full, "88122,session.sig=v1.k1.1.AAAA"),
		withMessageID(f, full, "88122,app.x="+strings.Repeat("%FF", 2700)),
		strings.Replace(withMessageID(f, full, "2"), "telegram", "slack", 1),
		full + ",app.tenant=acme",
		"session.chat_id=c,session.message_id=2",
	} {
		f.Add(full, second, true, true, false)
		f.Add(full, second, false, false, true)
	}
	f.Add("session.chat_id=c", "session.chat_id=c", true, true, false)
	// Lines that name no session: the cache of such lines serves the same
	// line byte for byte, and nothing else.
	const app = "app.tenant=t-42,app.plan=pro,app.region=eu-west-1"
	for _, second := range []string{app, "app.tenant=t-43,app.plan=pro,app.region=eu-west-1",
		"app.plan=pro,app.tenant=t-42,app.region=eu-west-1", app + ",", app + " ", app + ";p=1", app + ",app.tenant=t-1"} {
		f.Add(app, second, false, false, true)
		f.Add(app, second, true, true, false)
	}
	f.Add("app.a=1;p=2", "app.a=1;p=2", true, false, true)
	f.Add("app.a=1,app.a=2", "app.a=1,app.a=2", true, true, false)
	// The same members in another order: the parser's last one wins.
	f.Add("app.a=1,app.a=2,session.chat_id=c,session.message_id=1", "app.a=2,app.a=1,session.chat_id=c,session.message_id=2", true, false, false)
	f.Add("app.a=1,app.a,session.chat_id=c,session.message_id=1", "app.a,app.a=1,session.chat_id=c,session.message_id=2", true, false, false)
	f.Add("session.chat_id=c,session.message_id=1,app.a=1", "app.a=1,session.message_id=2,session.chat_id=c", true, true, false)
	f.Add("session.chat_id=c,session.message_id=1", "session.chat_id=c,session.message_id=2", true, false, true)
	f.Add("session.chat_id=c,session.message_id=1", "session.chat_id=c,session.message_id=1,session.message_id=1", true, true, false)
	f.Add("session.chat_id=c,session.message_id=1", "session.chat_id=c,session.message_id=12", true, true, true)
	f.Add("session.chat_id=c,session.message_id=1", "session.chat_id=c,session.message_id=", true, true, true)

	bound := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "old", Cwd: "/old"})
	f.Fuzz(func(t *testing.T, first, second string, trusted, header, sessionInBase bool) {
		base := context.Background()
		if sessionInBase {
			base = bound
		}
		cached := propagation.NewInbound(trustNamed)
		// Twice: a line makes an entry the second time it is accepted. A
		// refused first line makes none; the second is compared all the
		// same.
		extractLine(cached, context.Background(), first, header, true)
		extractLine(cached, context.Background(), first, header, true)
		before := cached.Counts()
		gotCtx, gotErr := extractLine(cached, base, second, header, trusted)
		got := outcomeOf(gotCtx, gotErr)
		after := cached.Counts()
		if gotErr == nil && sessionstate.Atop(gotCtx, baggage.FromContext(gotCtx)) {
			// Sent on, a session served from the cache is what its
			// members are.
			checkSentOnAsChecked(t, gotCtx)
		}

		plain := propagation.NewInbound(trustNamed, propagation.WithCacheSize(0))
		want := outcomeOf(extractLine(plain, base, second, header, trusted))
		if !got.equal(want) {
			t.Fatalf("after %q, the cached policy extracted %q as\n%+v\nwithout the cache:\n%+v", first, second, got, want)
		}
		counts := plain.Counts()
		delta := propagation.Counts{Accepted: after.Accepted - before.Accepted, Untrusted: after.Untrusted - before.Untrusted,
			Rejected: after.Rejected - before.Rejected}
		if delta.Accepted != counts.Accepted || delta.Untrusted != counts.Untrusted || delta.Rejected != counts.Rejected {
			t.Fatalf("counts %+v with the cache, %+v without", delta, counts)
		}
	})
}

// TestInboundCacheServesTheNextMessage walks through what the cache serves
// and what it does not: the next message of a conversation (a new message
// id) is served, and the same line from a peer the policy does not trust
// is stripped as ever; a line that differs anywhere else, carries a
// signature, had a display value cut, or was refused or stripped, is not.
func TestInboundCacheServesTheNextMessage(t *testing.T) {
	full := sessionHeaderOf(fullTestSession)
	p := propagation.NewInbound(trustNamed)
	cachedAfter := func(line string, trusted bool) uint64 {
		t.Helper()
		ctx, err := extractLine(p, context.Background(), line, false, trusted)
		if err != nil {
			t.Fatalf("extract %q: %v", line, err)
		}
		if v, _ := otelsession.Lookup(ctx, otelsession.FieldMessageID); trusted && !strings.Contains(line, "message_id="+v) {
			t.Fatalf("message id read as %q from %q", v, line)
		}
		return p.Counts().Cached
	}
	// The first message is noted, the second makes the entry.
	for _, id := range []string{"88121", "88122"} {
		if n := cachedAfter(withMessageID(t, full, id), true); n != 0 {
			t.Fatalf("message %s was served from the cache (%d)", id, n)
		}
	}
	for i := range 5 {
		if n := cachedAfter(withMessageID(t, full, fmt.Sprint(90000+i)), true); n != uint64(i+1) {
			t.Fatalf("message %d: %d served from the cache, want %d", i, n, i+1)
		}
	}
	// The same line from an untrusted peer: stripped, not counted as cached.
	ctx, err := extractLine(p, context.Background(), withMessageID(t, full, "7"), false, false)
	if err != nil || propagation.HasSession(baggage.FromContext(ctx)) {
		t.Fatalf("an untrusted peer's line kept its session (err %v)", err)
	}
	if c := p.Counts(); c.Cached != 5 || c.Untrusted != 1 || c.Accepted != 7 {
		t.Fatalf("counts %+v", c)
	}
	// Other lines: another scope is a conversation of its own, served from
	// its third message on; a line whose display value the policy cuts
	// makes no entry.
	for _, c := range []struct {
		line   string
		served uint64
	}{
		{strings.Replace(full, "guild-7", "guild-8", 1), 1},
		{strings.Replace(full, "guild-7", "guild-8", 1) + ",app.x=1", 1},
		{withValue(t, full, otelsession.KeyPrefix+"chat_name", strings.Repeat("n", 3000)), 0},
	} {
		before, truncated := p.Counts().Cached, p.Counts().Truncated
		for _, id := range []string{"1", "2", "3"} {
			if _, err := extractLine(p, context.Background(), withMessageID(t, c.line, id), false, true); err != nil {
				t.Fatal(err)
			}
		}
		if n := p.Counts().Cached - before; n != c.served {
			t.Fatalf("%.60q…: %d of its three messages served from the cache, want %d", c.line, n, c.served)
		}
		if cut := p.Counts().Truncated - truncated; (c.served == 0) != (cut == 3) {
			t.Fatalf("%.60q…: %d display values cut", c.line, cut)
		}
	}
	// Lines from an untrusted peer are neither noted nor make an entry.
	other := strings.Replace(full, "guild-7", "guild-9", 1)
	before := p.Counts().Cached
	extractLine(p, context.Background(), other, false, false)
	extractLine(p, context.Background(), withMessageID(t, other, "2"), false, false)
	extractLine(p, context.Background(), withMessageID(t, other, "3"), false, true)
	if n := p.Counts().Cached - before; n != 0 {
		t.Fatalf("a line an untrusted peer sent first made an entry (%d served)", n)
	}
}

// TestInboundCacheConversationsKeepTheirSessions extracts the messages of
// many conversations at once through one policy whose cache is smaller
// than the conversations: every context holds its own message's session,
// whichever entry served it (run with -race).
func TestInboundCacheConversationsKeepTheirSessions(t *testing.T) {
	p := propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(8))
	const convs, msgs = 64, 40
	lines := make([]string, convs)
	for c := range lines {
		s := fullTestSession
		s.ChatID = fmt.Sprintf("chat-%d", c)
		lines[c] = sessionHeaderOf(s)
	}
	var wg sync.WaitGroup
	errs := make(chan error, convs)
	for w := range 4 {
		wg.Go(func() {
			for i := range convs * msgs / 4 {
				c := (i*7 + w*13) % convs
				id := fmt.Sprintf("%d-%d-%d", c, w, i)
				ctx, err := extractLine(p, context.Background(), withMessageID(t, lines[c], id), i%2 == 0, true)
				if err != nil {
					errs <- err
					return
				}
				chat, _ := otelsession.Lookup(ctx, otelsession.FieldChatID)
				msg, _ := otelsession.Lookup(ctx, otelsession.FieldMessageID)
				member := baggage.FromContext(ctx).Member(otelsession.KeyPrefix + "message_id").Value()
				if chat != fmt.Sprintf("chat-%d", c) || msg != id || member != id {
					errs <- fmt.Errorf("conversation %d, message %s: read chat %q, message %q (member %q)", c, id, chat, msg, member)
					return
				}
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if c := p.Counts(); c.Cached == 0 || c.Accepted != convs*msgs {
		t.Fatalf("counts %+v", c)
	}
}

// TestInboundCacheKeepsOpenTelemetrysLimits puts the message id's new value
// where it takes OpenTelemetry's parse past its byte limit: a line whose
// last member, the application's, holds bytes the parse encodes again
// longer (%FF becomes %EF%BF%BD), sized so that the parse of the first
// line keeps that member and the parse of the next message, one byte
// longer, drops it. The cached policy must drop it too, as the uncached
// one does.
func TestInboundCacheKeepsOpenTelemetrysLimits(t *testing.T) {
	full := sessionHeaderOf(fullTestSession)
	const id = "88121"
	if !strings.Contains(full, "message_id="+id) {
		t.Fatalf("no message id %s in %q", id, full)
	}
	grown := strings.Repeat("%FF", 800)
	kept := func(line string) bool {
		b, _ := baggage.Parse(line)
		return b.Member("app.x").Key() != ""
	}
	first := ""
	for pad := range 2000 {
		line := full + ",app.x=" + grown + strings.Repeat("a", pad)
		if kept(line) && !kept(withMessageID(t, line, id+"0")) {
			first = line
			break
		}
	}
	if first == "" {
		t.Fatal("found no line at OpenTelemetry's limit")
	}
	if len(first) > otelsession.MaxBaggageBytes {
		t.Fatalf("the line is %d bytes, over the raw limit", len(first))
	}
	next := withMessageID(t, first, id+"0")
	cached := propagation.NewInbound(propagation.TrustAll)
	for range 2 { // the second makes the entry
		if _, err := extractLine(cached, context.Background(), first, false, true); err != nil {
			t.Fatalf("the first line was refused: %v", err)
		}
	}
	got := outcomeOf(extractLine(cached, context.Background(), next, false, true))
	want := outcomeOf(extractLine(propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(0)), context.Background(), next, false, true))
	if !got.equal(want) {
		t.Fatalf("next message with the cache:\n%+v\nwithout:\n%+v", got, want)
	}
	if slices.ContainsFunc(got.members, func(m string) bool { return strings.HasPrefix(m, "app.x=") }) {
		t.Fatal("the member OpenTelemetry's parse drops is kept")
	}
}

// TestInboundCacheSignedSessions runs a conversation's signed messages, as
// the gateway's workers receive them (a NATS message id each, a policy that
// trusts no peer and verifies signatures), through a policy with the cache
// and one without: from the third message on the cache serves them, and
// whatever a message carries (its own signature, one made for another
// message, a changed message id, a replay) both policies return the same.
func TestInboundCacheSignedSessions(t *testing.T) {
	key := testKey("k1")
	signer := mustSigner(t, key, signTime)
	newPolicy := func(opts ...propagation.InboundOption) *propagation.Inbound {
		return propagation.NewInbound(propagation.TrustNone, append(opts, propagation.WithVerifier(mustVerifier(t, signTime, key)))...)
	}
	cached, plain := newPolicy(), newPolicy(propagation.WithCacheSize(0))
	type message struct {
		line, natsID string
	}
	signed := func(id, natsID string) message {
		s := fullTestSession
		s.MessageID = id
		ctx, err := signer.SignFor(otelsession.Bind(context.Background(), s), natsID)
		if err != nil {
			t.Fatal(err)
		}
		return message{headerLines(ctx)[0], natsID}
	}
	extract := func(p *propagation.Inbound, m message) outcome {
		prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
		c := otelprop.MapCarrier{"baggage": m.line, "traceparent": testTraceparent}
		return outcomeOf(p.Extract(context.Background(), prop, c, propagation.Peer{Transport: "nats", Name: "jobs", MessageID: m.natsID}))
	}
	check := func(name string, m message, accepted bool) {
		t.Helper()
		got, want := extract(cached, m), extract(plain, m)
		if !got.equal(want) {
			t.Fatalf("%s: with the cache\n%+v\nwithout:\n%+v", name, got, want)
		}
		if (want.err == "" && want.atop) != accepted {
			t.Fatalf("%s: accepted %v (error %q), want %v", name, !accepted, want.err, accepted)
		}
	}
	var msgs []message
	for i := range 8 {
		msgs = append(msgs, signed(fmt.Sprint(9000+i), fmt.Sprint("nats-", i)))
	}
	for i, m := range msgs[:6] {
		check(fmt.Sprint("message ", i), m, true)
	}
	if c := cached.Counts(); c.Cached != 4 || c.Signed != 6 || c.Accepted != 6 {
		t.Fatalf("counts with the cache: %+v", c)
	}
	// A signature made for another message id than the one in the line.
	check("a message id changed after signing", message{withMessageID(t, msgs[6].line, "9999"), msgs[6].natsID}, false)
	// A signature bound to another NATS message.
	check("a signature moved onto another message", message{msgs[7].line, "nats-other"}, false)
	// A signature that is not one.
	check("a signature replaced", message{withValue(t, msgs[7].line, otelsession.SignatureKey, "v1.k1.1.AAAA"), msgs[7].natsID}, false)
	// The same message again (a redelivery).
	check("a redelivered message", msgs[3], true)
	if c, p := cached.Counts(), plain.Counts(); c.BadSignature != p.BadSignature || c.BadSignature != 3 || c.Accepted != p.Accepted {
		t.Fatalf("counts with the cache %+v, without %+v", c, p)
	}

	// Without a verifier the peer is judged, with the context the policy
	// extracted, signature included: a policy that trusts a peer by what
	// the baggage holds sees the same context with the cache.
	bySignature := func(ctx context.Context, _ propagation.Peer) bool {
		return baggage.FromContext(ctx).Member(otelsession.SignatureKey).Key() != ""
	}
	cached = propagation.NewInbound(bySignature)
	plain = propagation.NewInbound(bySignature, propagation.WithCacheSize(0))
	for i, m := range msgs[:6] {
		check(fmt.Sprint("without a verifier, message ", i), m, true)
	}
}

// TestQuietLineCache walks through the cache of lines that name no session:
// a line carrying only the application's baggage is served from the
// cache from its third extraction (noted, entry made, served), only when
// it comes again byte for byte, and into a context whose own session is
// Reset, as without the cache; a line the policy hands to OpenTelemetry's
// parser (not simple) is never kept, and a policy without a cache serves
// nothing. The cache is the smallest, one set of four, so that every line
// is looked up where the entry of another is.
func TestQuietLineCache(t *testing.T) {
	const app = "app.tenant=t-42,app.plan=pro,app.region=eu-west-1"
	bound := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "old", UISessionID: "ui"})
	check := func(t *testing.T, p *propagation.Inbound, base context.Context, line string, header bool, wantServed uint64) {
		t.Helper()
		before := p.Counts().CachedNoSession
		got := outcomeOf(extractLine(p, base, line, header, false))
		want := outcomeOf(extractLine(propagation.NewInbound(trustNamed, propagation.WithCacheSize(0)), base, line, header, false))
		if !got.equal(want) {
			t.Fatalf("%q extracted as\n%+v\nwithout the cache:\n%+v", line, got, want)
		}
		if served := p.Counts().CachedNoSession - before; served != wantServed {
			t.Fatalf("%q: %d served from the cache, want %d", line, served, wantServed)
		}
	}
	for _, header := range []bool{false, true} {
		t.Run(fmt.Sprintf("header=%v", header), func(t *testing.T) {
			p := propagation.NewInbound(trustNamed, propagation.WithCacheSize(4))
			check(t, p, context.Background(), app, header, 0) // noted
			check(t, p, context.Background(), app, header, 0) // entry made
			check(t, p, context.Background(), app, header, 1)
			check(t, p, bound, app, header, 1) // the base's session is Reset
			for _, other := range []string{
				"app.tenant=t-43,app.plan=pro,app.region=eu-west-1",
				"app.plan=pro,app.tenant=t-42,app.region=eu-west-1", // the same members: another line
				app + ",app.x=1",
				app[:len(app)-1],
			} {
				check(t, p, context.Background(), other, header, 0)
			}
			check(t, p, context.Background(), app, header, 1)
			if c := p.Counts(); c.Accepted+c.Untrusted+c.Rejected+c.Cached != 0 {
				t.Fatalf("lines without a session were counted as sessions: %+v", c)
			}
		})
	}
	t.Run("not simple", func(t *testing.T) {
		p := propagation.NewInbound(trustNamed)
		for _, line := range []string{"app.a=1;p=2", "app.a=1, app.b=2", "app.a=1,,app.b=2"} {
			for range 4 {
				check(t, p, context.Background(), line, false, 0)
			}
		}
	})
	t.Run("cache off", func(t *testing.T) {
		p := propagation.NewInbound(trustNamed, propagation.WithCacheSize(0))
		for range 4 {
			check(t, p, context.Background(), app, false, 0)
		}
	})
	t.Run("a session line", func(t *testing.T) {
		// A line naming a session key in any spelling is the policy's to
		// judge: never served from the table of lines without one.
		p := propagation.NewInbound(trustNamed)
		for range 4 {
			check(t, p, context.Background(), app+",Session.Chat_ID=c", false, 0)
		}
	})
}

// TestQuietLineCacheConcurrentLines extracts eight lines without a session,
// each with its own tenant, from four goroutines at once through one
// policy with a small cache (32 lines without a session, in sets of four):
// every context holds its own line's members, whichever entry served it.
func TestQuietLineCacheConcurrentLines(t *testing.T) {
	p := propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(128))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				n := (i*5 + w) % 8
				line := fmt.Sprintf("app.tenant=t-%d,app.plan=pro", n)
				ctx, err := extractLine(p, context.Background(), line, i%2 == 0, true)
				if got := baggage.FromContext(ctx).Member("app.tenant").Value(); err != nil || got != fmt.Sprintf("t-%d", n) {
					errs <- fmt.Errorf("line %q: tenant %q, error %v", line, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Two lines whose notes share a slot of the table of lines seen once,
	// and which keep coming in turn, may never make an entry: the count
	// only shows that entries served lines while others were made.
	if c := p.Counts(); c.CachedNoSession < 4*2000/8 {
		t.Fatalf("only %d of %d lines served from the cache", c.CachedNoSession, 4*2000)
	}
}
