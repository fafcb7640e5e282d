package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwire/sessionwire/internal/syncbuf"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// One chat whose deliveries its platform refuses for good (Telegram answers
// 403 "bot was blocked by the user" to a chat whose user blocked the bot,
// everyday traffic) holds up no other chat of that platform. Its deliveries
// used to be retried for ever and counted against the platform's breaker,
// each coming back as the breaker's probe and opening it again: no other
// chat of the platform got a reply for minutes. Now each is posted once,
// refused (reported, with the platform's status, and logged), and the other
// chats' replies arrive at once.
func TestAChatItsPlatformRefusesHoldsUpNoOther(t *testing.T) {
	var log syncbuf.Buffer
	c := testConfig(t, "--messages", "1", "--conversations", "1")
	c.routerLog = &log
	top := refusingTopology(t, c, "telegram/403403", http.StatusForbidden)
	defer func() {
		if t.Failed() {
			t.Logf("the router's log:\n%s", log.String())
		}
	}()

	refusals := watchRefusals(t, top.nc)

	post := func(body string) { t.Helper(); postTelegram(t, top, body) }
	refusedPosts := func() map[string]int {
		top.p.mu.Lock()
		defer top.p.mu.Unlock()
		return maps.Clone(top.p.refusedPosts)
	}
	// Six messages to the chat that blocked the bot, one of them starting
	// background work, whose completion is refused too; once the platform has
	// refused five posts (which opened its breaker, before), five to other
	// chats.
	for i := 1; i <= 6; i++ {
		post(fmt.Sprintf(`{"message_id":%d,"chat":{"id":403403,"type":"private"},"from":{"id":403403},"text":"hi","background":%t}`, i, i == 1))
	}
	posted := func() (n int) {
		for _, k := range refusedPosts() {
			n += k
		}
		return n
	}
	require.Eventually(t, func() bool { return posted() >= breakerTrips }, 30*time.Second, 20*time.Millisecond,
		"the platform was asked to deliver the blocked chat's replies")
	start := time.Now()
	want := map[string]int{}
	for i := 1; i <= 5; i++ {
		chat := fmt.Sprint(-1000 - i)
		post(fmt.Sprintf(`{"message_id":%d,"chat":{"id":%s,"type":"supergroup"},"from":{"id":7},"text":"hi"}`, 100+i, chat))
		want["reply "+chat] = 1
	}
	delivered := func() map[string]int {
		top.p.mu.Lock()
		defer top.p.mu.Unlock()
		m := map[string]int{}
		for _, d := range top.p.deliveries {
			m[d.Kind+" "+d.Origin.ChatID]++
		}
		return m
	}
	assert.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, delivered()) }, 30*time.Second, 50*time.Millisecond,
		"every other chat's reply arrives, within 30 s")
	assert.Equal(t, want, delivered(), "the other chats' replies, and nothing for the chat that blocked the bot")
	t.Logf("the other chats' replies arrived within %v", time.Since(start).Round(time.Millisecond))

	wantRefused := []string{"completion.1"}
	for i := 1; i <= 6; i++ {
		wantRefused = append(wantRefused, fmt.Sprint("reply.", i))
	}
	reasons := refusals
	assert.Eventually(t, func() bool { return len(reasons()) == len(wantRefused) }, 30*time.Second, 50*time.Millisecond,
		"each of the blocked chat's deliveries is reported refused")
	got := reasons()
	for _, k := range wantRefused {
		assert.Contains(t, got[k], "telegram answered 403 Forbidden", k)
	}

	// Longer than any retry waits (5 s): a refused delivery is not posted again.
	time.Sleep(6 * time.Second)
	posts := refusedPosts()
	assert.Len(t, posts, len(wantRefused), "posts to the chat that blocked the bot, by delivery: %v", posts)
	for k, n := range posts {
		assert.LessOrEqual(t, n, 2, "%s was posted %d times: retried more than once", k, n)
	}
	t.Logf("posts to the chat that blocked the bot: %v", posts)

	// The operator sees it: the platform, the kind, the message, the chat and
	// the platform's answer; and it was never taken for a platform that is down.
	out := log.String()
	assert.Regexp(t, `router: refused (reply|completion) [1-6] to telegram chat 403403: telegram answered 403 Forbidden: `+
		`\{"ok":false,"error_code":403,"description":"Forbidden: the stand-in platform refuses this chat"\} \(final: not retried\)`, out)
	assert.NotRegexp(t, `403 Forbidden.*\(trying it again\)`, out, "a final refusal is not retried")
	assert.NotContains(t, out, "not called", "the platform's breaker stayed closed")
}

// A delivery its platform refuses for good, though the message was sent
// with all it needs, fails a load run: the driver counts it refused wrongly,
// and says why, rather than waiting for it as lost or passing it as fine.
func TestAPlatformsFinalRefusalFailsTheRun(t *testing.T) {
	c := testConfig(t, "--messages", "24", "--conversations", "4")
	c.routerLog = io.Discard
	top := refusingTopology(t, c, "telegram/-1001000000000", http.StatusForbidden) // plan's first conversation
	s, err := top.drive(context.Background(), c.seed, nil)
	require.NoError(t, err)
	t.Logf("\n%s", s)
	assert.Positive(t, s.WronglyRefused)
	assert.Contains(t, s.FirstWrongRefusal, "telegram answered 403 Forbidden")
	assert.Zero(t, s.Lost)
	assert.Equal(t, s.Expected, s.Delivered+s.WronglyRefused)
	assert.False(t, s.ok())
}

// Which answers of a platform end a delivery for good: the 4xx about this
// request. A timeout, a rate limit, a request with the same idempotency key
// still in progress, "too early", the gateway's own credentials, a server
// error, a redirect not followed are all worth another try.
func TestWhichPlatformAnswersAreFinal(t *testing.T) {
	for status, final := range map[int]bool{
		200: false, 204: false, 302: false, 304: false,
		400: true, 403: true, 404: true, 410: true, 413: true, 422: true,
		401: false, 407: false, 408: false, 409: false, 425: false, 429: false,
		500: false, 502: false, 503: false, 504: false,
	} {
		assert.Equal(t, final, finalStatus(status), "%d", status)
	}

	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"": 0, "3": 3 * time.Second, " 2 ": 2 * time.Second, "1.5": 1500 * time.Millisecond, "0": 0, "-4": 0,
		"NaN": 0, "+Inf": time.Minute, "86400": time.Minute, "soon": 0,
		now.Add(10 * time.Second).Format(http.TimeFormat): 10 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
		now.Add(time.Hour).Format(http.TimeFormat):        time.Minute,
	} {
		assert.Equal(t, want, retryAfterHeader(h, now), "Retry-After: %q", h)
	}

	// What the router makes of the answers, from a platform.
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/telegram":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}`+"\n\x1b[31mred\r\n")
		case "/discord":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/slack":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusInternalServerError) // a Retry-After only a 429 or a 503 is asked to honour
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer platform.Close()
	rt := &router{platformURL: platform.URL, client: platform.Client()}
	deliver := func(p string) *platformAnswer {
		err := rt.deliver(context.Background(), notification{Kind: "reply", ID: "9", Key: "k", Origin: otelsession.Origin{Platform: p, ChatID: "c"}})
		if err == nil {
			return nil
		}
		a, ok := err.(*platformAnswer)
		require.True(t, ok, "%s: %v", p, err)
		return a
	}
	a := deliver("telegram")
	assert.True(t, a.final())
	assert.Equal(t, `{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}`+" \uFFFD[31mred", a.body,
		"the start of the body, on one line")
	assert.Equal(t, `deliver reply 9 to telegram: it answered 403 Forbidden: `+a.body, a.Error())
	a = deliver("discord")
	assert.False(t, a.final())
	assert.Equal(t, 7*time.Second, a.wait)
	assert.Equal(t, "429", failureClass(a))
	a = deliver("slack")
	assert.False(t, a.final())
	assert.Zero(t, a.wait)
	assert.Nil(t, deliver("api_server"))
	long := excerpt([]byte(strings.Repeat("é", 300)))
	assert.Equal(t, strings.Repeat("é", 200)+"…", long)
}

// Every refusal is logged, not only reported to whoever listens on the
// refusals subject: once per class in 30 s, with a count, so a flood of
// forgeries costs a line, and what a forger or a platform wrote cannot
// break a line or print one of its own.
func TestRefusalsAreLoggedOncePerClass(t *testing.T) {
	ns, shutdown, err := embeddedNATS()
	require.NoError(t, err)
	defer shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	var reported sync.WaitGroup
	sub, err := nc.Subscribe(refusedSubject, func(*nats.Msg) { reported.Done() })
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.Flush())

	var out strings.Builder
	rt := &router{nc: nc, refusals: onceLog{who: "router", like: "refusals", out: &out}}
	reported.Add(53)
	for i := range 50 {
		rt.refuseForged(notification{Kind: "reply", ID: fmt.Sprint("f", i, "\nrouter: delivered everything"),
			Origin: otelsession.Origin{Platform: "telegram", ChatID: "-100999"}}, "forged: no signed session")
	}
	scoped := notification{Kind: "completion", ID: "77", Key: "k77", Origin: otelsession.Origin{Platform: "slack", ChatID: "C1\x1b[2J", ThreadID: "1.2"}}
	rt.refuse(scoped, "no scope", "scoped platform without a scope, and not a direct message to a user")
	rt.refuse(scoped, "no scope", "scoped platform without a scope, and not a direct message to a user")
	assert.Equal(t, `router: refused a forged notification (by its own account kind "reply", id "f0\nrouter: delivered everything", platform "telegram", chat "-100999"): forged: no signed session [refusals like it: one line in 30 s, with a count]`+"\n"+
		"router: refused completion 77 to slack chat C1\uFFFD[2J thread 1.2: scoped platform without a scope, and not a direct message to a user [refusals like it: one line in 30 s, with a count]\n",
		out.String())
	out.Reset()
	rt.refusals.printed["forged"] = time.Now().Add(-31 * time.Second)
	rt.refuseForged(notification{Kind: "completion", ID: "g"}, "forged: bad signature")
	assert.Equal(t, `router: refused a forged notification (by its own account kind "completion", id "g", platform "", chat ""): forged: bad signature [and 49 more like it since the last such line]`+"\n", out.String())
	waited := make(chan struct{})
	go func() { reported.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("not every refusal was reported on the refusals subject")
	}
}

// One chat whose deliveries its platform keeps failing without refusing
// them for good (a 503 for that chat alone; Telegram's 429 "Too Many
// Requests", which it sends per chat) holds up no other chat either. The
// failures, all for one chat, used to open the platform's breaker, and the
// chat's deliveries, retried in step with the breaker's pause, came back
// as its probe every time: 0 of the 5 other chats' replies in 90 s. Now a
// 429 is an answer (retried when the platform says, not counted against
// it), failures for one chat alone do not open the breaker, and retries
// are spread (jitter).
func TestAChatItsPlatformKeepsFailingHoldsUpNoOther(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			c := testConfig(t, "--messages", "1", "--conversations", "1")
			c.routerLog = io.Discard
			top := refusingTopology(t, c, "telegram/503503", status)
			post := func(body string) { t.Helper(); postTelegram(t, top, body) }
			failed := func() (n int) {
				top.p.mu.Lock()
				defer top.p.mu.Unlock()
				for _, k := range top.p.refusedPosts {
					n += k
				}
				return n
			}
			for i := 1; i <= 6; i++ {
				post(fmt.Sprintf(`{"message_id":%d,"chat":{"id":503503,"type":"private"},"from":{"id":5},"text":"hi"}`, i))
			}
			require.Eventually(t, func() bool { return failed() >= 2*breakerTrips }, 30*time.Second, 20*time.Millisecond,
				"the platform failed the chat's deliveries, and their retries")
			start := time.Now()
			for i := 1; i <= 5; i++ {
				post(fmt.Sprintf(`{"message_id":%d,"chat":{"id":%d,"type":"supergroup"},"from":{"id":7},"text":"hi"}`, 100+i, -1000-i))
			}
			delivered := func() int { top.p.mu.Lock(); defer top.p.mu.Unlock(); return len(top.p.deliveries) }
			assert.Eventually(t, func() bool { return delivered() == 5 }, 30*time.Second, 50*time.Millisecond,
				"every other chat's reply arrives, within 30 s")
			t.Logf("the other chats' replies arrived within %v; %d posts to the failing chat", time.Since(start).Round(time.Millisecond), failed())
		})
	}
}

// postTelegram posts a Telegram message to the topology's ingress, which
// must queue it.
func postTelegram(t *testing.T, top *topology, body string) {
	t.Helper()
	resp, err := http.Post(top.cfg.ingressURL+"/v1/telegram/messages", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
}

// refusingTopology starts c's topology, stopped when the test ends, whose
// stand-in platform answers every post to chat ("platform/chat") with
// status.
func refusingTopology(t *testing.T, c config, chat string, status int) *topology {
	t.Helper()
	top, err := startTopology(context.Background(), c)
	require.NoError(t, err)
	t.Cleanup(top.stop)
	top.p.mu.Lock()
	top.p.refuse = map[string]int{chat: status}
	top.p.mu.Unlock()
	return top
}

// A platform that is down keeps its notifications waiting for their retries,
// each counted against its consumer's limit of unacknowledged messages
// (1,024; 8 here). With one consumer for every platform, a platform down
// long enough held every slot, and no other platform got anything until it
// came back.
func TestAPlatformThatIsDownHoldsUpNoOther(t *testing.T) {
	const pending = 8
	c := testConfig(t, "--messages", "1", "--conversations", "1")
	c.routerLog, c.ackPending = io.Discard, pending
	top := refusingTopology(t, c, "discord/*", http.StatusServiceUnavailable)
	for i := range 3 * pending {
		body := fmt.Sprintf(`{"id":"%d","channel_id":"C%d","guild_id":"G1","author":{"id":"u7"},"content":"hi"}`, 500+i, i)
		resp, err := http.Post(top.cfg.ingressURL+"/v1/discord/messages", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	}
	// Every Discord reply is queued, and the router has tried some (its
	// breaker then stops calling Discord, and each waits for its retry).
	js, err := jetstream.New(top.nc)
	require.NoError(t, err)
	queued := func() uint64 {
		s, err := js.Stream(context.Background(), repliesStream)
		if err != nil {
			return 0
		}
		return s.CachedInfo().State.Msgs
	}
	tried := func() int { top.p.mu.Lock(); defer top.p.mu.Unlock(); return len(top.p.refusedPosts) }
	require.Eventually(t, func() bool { return queued() >= 3*pending && tried() >= breakerTrips }, 60*time.Second, 20*time.Millisecond,
		"every Discord reply queued, and tried")
	start := time.Now()
	for i := 1; i <= 5; i++ {
		postTelegram(t, top, fmt.Sprintf(`{"message_id":%d,"chat":{"id":%d,"type":"supergroup"},"from":{"id":7},"text":"hi"}`, 100+i, -1000-i))
	}
	delivered := func() int { top.p.mu.Lock(); defer top.p.mu.Unlock(); return len(top.p.deliveries) }
	assert.Eventually(t, func() bool { return delivered() == 5 }, 30*time.Second, 50*time.Millisecond,
		"every Telegram reply arrives while Discord is down, within 30 s")
	t.Logf("Telegram's replies arrived within %v; %d of Discord's waiting, %d tried", time.Since(start).Round(time.Millisecond), queued(), tried())
}

// A router of this version started on the streams of an earlier one, whose
// single consumer took every subject and whose workers queued on
// gw.replies.<kind>: its consumers are created beside it (a work-queue
// stream refuses two whose subjects overlap), and what was queued before
// the upgrade is still taken.
func TestTheRoutersConsumersReplaceAnEarlierVersions(t *testing.T) {
	nc, js := embeddedJetStream(t)
	ctx := context.Background()
	require.NoError(t, ensureJetStream(ctx, nc, js, layout{}))
	_, err := js.CreateOrUpdateConsumer(ctx, repliesStream, jetstream.ConsumerConfig{ // the earlier version's
		Durable: "router", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxAckPending: 1024,
	})
	require.NoError(t, err)
	for _, subject := range []string{repliesSubject + "reply", replySubject("reply", "slack"), replySubject("completion", "matrix")} {
		_, err := js.Publish(ctx, subject, []byte(subject))
		require.NoError(t, err)
	}

	got := map[string]string{} // subject: consumer
	for _, rc := range routerConsumers() {
		c, err := consumer(ctx, js, "test", repliesStream, rc.name, time.Second, rc.filters, 0)
		require.NoError(t, err, rc.name)
		batch, err := c.FetchNoWait(10)
		require.NoError(t, err)
		for m := range batch.Messages() {
			got[m.Subject()] = rc.name
		}
	}
	assert.Equal(t, map[string]string{
		"gw.replies.reply":            "router", // queued by an earlier version's worker
		"gw.replies.reply.slack":      "router-slack",
		"gw.replies.completion.other": "router-other",
	}, got)
}

// A queued message is signed when it is queued and verified when it is
// taken, which may be long after: behind a platform or a service that is
// down, or a router that is. Every role verified at the library's default
// of 5 minutes, so a router restarted after 6 minutes refused all it found
// queued as forged. The roles now verify up to --max-wait (an hour by
// default), and the streams' duplicate window and the delivery records
// last as long, so a copy published again while it still verifies is
// stored or delivered once.
func TestAQueuedMessageIsTakenUpToMaxWait(t *testing.T) {
	c := testConfig(t)
	require.Equal(t, time.Hour, c.layout.wait(), "the default")
	_, verifier, err := hop(c.key, c.layout.wait())
	require.NoError(t, err)
	session := otelsession.Bind(context.Background(), otelsession.Session{Platform: "telegram", ChatID: "-100", MessageID: "1"})
	for _, tc := range []struct {
		age  time.Duration
		want error
	}{
		{6 * time.Minute, nil},
		{59 * time.Minute, nil},
		{61 * time.Minute, propagation.ErrSignatureExpired},
	} {
		signer, err := propagation.NewSigner(c.key, propagation.WithClock(func() time.Time { return time.Now().Add(-tc.age) }))
		require.NoError(t, err)
		signed, err := signer.SignFor(session, "reply-k")
		require.NoError(t, err)
		err = verifier.Verify(signed, "reply-k")
		if tc.want == nil {
			assert.NoError(t, err, "signed %v ago", tc.age)
		} else {
			assert.ErrorIs(t, err, tc.want, "signed %v ago", tc.age)
		}
	}

	nc, js := embeddedJetStream(t)
	ctx := context.Background()
	// A deployment of an earlier version: a 5-minute window, records for an hour.
	_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: deliveredKV, TTL: time.Hour})
	require.NoError(t, err)
	l := layout{maxWait: 2 * time.Hour}
	require.NoError(t, ensureJetStream(ctx, nc, js, l))
	for _, name := range []string{jobsStream, bgStream, repliesStream} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, 2*time.Hour, s.CachedInfo().Config.Duplicates, name)
	}
	kv, err := js.Stream(ctx, "KV_"+deliveredKV)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Hour, kv.CachedInfo().Config.MaxAge, "the delivery records outlive what may still be delivered")
}

// A platform that refuses every chat with the same final answer is not
// refusing the deliveries but the router: a mistyped --platform-url, a
// wrong API path. A router started with one and then fixed used to throw
// away, for good, every reply of that window (72 in a 20 s window); now
// only the first chat's are (one chat may be refused by a platform that
// has taken nothing yet), and the others wait, retried as for a platform
// that is down, and arrive once the platform takes deliveries.
func TestAPlatformThatRefusesEveryChatIsNotBelieved(t *testing.T) {
	var log syncbuf.Buffer
	c := testConfig(t, "--messages", "1", "--conversations", "1")
	c.routerLog = &log
	top := refusingTopology(t, c, "telegram/*", http.StatusNotFound)
	refusals := watchRefusals(t, top.nc)
	const chats = 6
	for i := 1; i <= chats; i++ {
		postTelegram(t, top, fmt.Sprintf(`{"message_id":%d,"chat":{"id":%d,"type":"supergroup"},"from":{"id":7},"text":"hi"}`, i, -2000-i))
	}
	tried := func() int { top.p.mu.Lock(); defer top.p.mu.Unlock(); return len(top.p.refusedPosts) }
	require.Eventually(t, func() bool { return tried() == chats }, 30*time.Second, 20*time.Millisecond,
		"every chat's reply was posted, and answered 404")
	time.Sleep(time.Second) // retries come and go

	top.p.mu.Lock()
	top.p.refuse = nil // the router's URL fixed
	top.p.mu.Unlock()
	delivered := func() int { top.p.mu.Lock(); defer top.p.mu.Unlock(); return len(top.p.deliveries) }
	assert.Eventually(t, func() bool { return delivered()+len(refusals()) == chats }, 30*time.Second, 50*time.Millisecond,
		"every reply arrives once the platform takes deliveries, or was refused")
	assert.LessOrEqual(t, len(refusals()), 1, "at most the first chat's reply was refused for good: %v", refusals())
	assert.GreaterOrEqual(t, delivered(), chats-1)
	assert.Contains(t, log.String(), "has taken no delivery since this router started; if it answers 404 to every chat, check --platform-url")
}

// Which final answers the router believes: one chat's at once; a second
// chat's only from a platform that has taken a delivery; and, after one,
// fewer than breakerTrips chats in a row.
func TestRefusalJudge(t *testing.T) {
	var j refusalJudge
	assert.Empty(t, j.refused("telegram", "/1", 403), "one chat, before any delivery")
	assert.Empty(t, j.refused("telegram", "/1", 403), "the same chat again")
	assert.Contains(t, j.refused("telegram", "/2", 404), "telegram refused 2 chats and has taken no delivery")
	assert.Empty(t, j.refused("slack", "T/C1", 404), "each platform on its own")
	j.delivered("telegram")
	for i := 1; i < breakerTrips; i++ {
		assert.Empty(t, j.refused("telegram", fmt.Sprint("/", i), 403), "chat %d after a delivery", i)
	}
	assert.Contains(t, j.refused("telegram", "/9", 403), fmt.Sprintf("telegram refused %d chats in a row", breakerTrips))
	j.delivered("telegram")
	assert.Empty(t, j.refused("telegram", "/9", 403), "a delivery went through since")
}

// embeddedJetStream starts an embedded NATS server with JetStream, stopped
// when the test ends, and connects to it.
func embeddedJetStream(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ns, stop, err := embeddedNATS()
	require.NoError(t, err)
	t.Cleanup(stop)
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}
