package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// conversation is one chat thread the load driver talks in.
type conversation struct {
	platform                    string
	chat, thread, parent, scope string
	noScope                     bool // a scoped platform's message that lost its scope: must be refused
	dm                          bool // a Discord direct message: no guild, delivered for its user
}

// message is one message the driver sends, and what must come of it.
type message struct {
	id         string
	conv       conversation
	background bool
	sentAt     time.Time
}

// expected reports the deliveries the message must produce.
func (m message) expected() (reply, completion bool) {
	if m.conv.noScope {
		return false, false
	}
	return true, m.background && m.conv.platform != "api"
}

// route is where a delivery for the message must land.
func (m message) route() (platform, chat, thread, parent, anchor, scope string) {
	c := m.conv
	switch c.platform {
	case "api":
		return "api_server", m.id, "", "", m.id, "" // one request per message
	case "discord":
		return "discord", c.chat, c.thread, c.parent, m.id, c.scope
	}
	return c.platform, c.chat, c.thread, "", m.id, c.scope
}

// body is the message in its platform's own shape.
func (m message) body() (string, any) {
	c := m.conv
	switch c.platform {
	case "telegram":
		var u telegramUpdate
		fmt.Sscan(m.id, &u.MessageID)
		fmt.Sscan(c.chat, &u.Chat.ID)
		fmt.Sscan(c.thread, &u.MessageThreadID)
		u.Chat.Type, u.From.ID, u.From.FirstName, u.Text, u.Background = "supergroup", 4242, "Ada", "hi", m.background
		return "telegram", u
	case "discord":
		d := discordMessage{ID: m.id, ChannelID: c.chat, ParentID: c.parent, Content: "hi", Background: m.background}
		if !c.noScope && !c.dm {
			d.GuildID = c.scope
		}
		d.Author.ID, d.Author.Username = m.user(), "grace"
		return "discord", d
	case "slack":
		e := slackEvent{Channel: c.chat, ChannelType: "channel", ThreadTS: c.thread, TS: m.id, User: m.user(), Text: "hi", Background: m.background}
		if !c.noScope {
			e.Team = c.scope
		}
		return "slack", e
	}
	return "api", apiRequest{RequestID: m.id, User: m.user(), Input: "hi", Background: m.background}
}

// user is who sends the message: a delivery must carry it, and a direct
// message is delivered for it.
func (m message) user() string {
	switch m.conv.platform {
	case "telegram":
		return "4242"
	case "discord":
		return "u1"
	case "slack":
		return "U1"
	}
	return "svc"
}

// A run's message IDs are run*runIDSpan + i, the i-th message of run run,
// a number drawn in [minRun, minRun*10) for each run (newRun). A deployment
// that outlives a run keeps what it has seen: JetStream drops a job whose
// Nats-Msg-Id it stored within its duplicate window, and the router skips a
// delivery its bucket records as made. A chat platform never sends a message
// ID twice; were a second run to reuse the first's IDs, the deployment would
// rightly drop them as repeats, and the driver would count them lost. The
// IDs stay below 2^53, exact in any JSON reader, and fit Telegram's int64.
const (
	runIDSpan = maxMessages // a run's messages are numbered 0 to maxMessages-1
	minRun    = 100_000_000
)

// newRun draws a run number for plan's message IDs.
func newRun() uint64 { return minRun + rand.Uint64N(9*minRun) }

// plan builds n messages over conv conversations, interleaved: every
// conversation has messages in flight at once. The seed decides the
// conversations and which message goes to which; run (newRun) numbers the
// messages, so that no two runs send one message ID. Telegram numbers the
// messages of each chat, and a Slack ts is unique only within its channel,
// so there every chat counts from the run's first number: two chats send
// the same ID all the time, and each message is told apart by its chat, as
// the gateway must. Discord's IDs and the API's request IDs are unique
// across chats, and so are theirs. A third of the Discord conversations are
// direct messages: no guild, so their replies go out on their user binding.
func plan(n, conv int, seed, run uint64) []message {
	r := rand.New(rand.NewPCG(seed, 1))
	platforms := []string{"telegram", "discord", "slack", "api"}
	convs := make([]conversation, conv)
	for i := range convs {
		p := platforms[i%len(platforms)]
		c := conversation{platform: p}
		switch p {
		case "telegram":
			c.chat, c.thread = fmt.Sprint(-1001000000000-int64(i)), fmt.Sprint(100+i)
		case "discord":
			if (i/4)%3 == 2 { // a third of Discord's conversations are direct messages
				c.dm, c.chat = true, fmt.Sprint("dm-", i)
				break
			}
			c.scope, c.parent, c.chat = fmt.Sprint("guild-", i%7), fmt.Sprint("chan-", i), fmt.Sprint("thread-", i)
			c.thread = c.chat
		case "slack":
			c.scope, c.chat, c.thread = fmt.Sprint("T", i%5), fmt.Sprint("C", i), fmt.Sprintf("1733140%d.000100", i)
		}
		convs[i] = c
	}
	msgs := make([]message, n)
	inChat := map[string]uint64{} // Telegram's and Slack's next number, by chat
	for i := range msgs {
		c := convs[r.IntN(conv)]
		if c.platform != "telegram" && c.platform != "api" && r.IntN(50) == 0 && !c.dm {
			c.noScope = true // about 2% of scoped messages lose their scope on the way in (a DM has none)
		}
		seq := uint64(i)
		if c.platform == "telegram" || c.platform == "slack" {
			seq = inChat[c.platform+"/"+c.chat]
			inChat[c.platform+"/"+c.chat]++
		}
		msgs[i] = message{id: fmt.Sprint(run*runIDSpan + seq), conv: c, background: r.IntN(4) == 0}
	}
	return msgs
}

// key is the message's messageKey, as the ingress makes it from what the
// driver posts: the judge finds a delivery's message by it, the only name
// that is the message's alone.
func (m message) key() string {
	platform, chat, _, _, _, scope := m.route()
	if m.conv.noScope {
		scope = ""
	}
	return messageKey(platform, scope, chat, m.id)
}

// platforms stands in for the chat APIs: it records what it is sent. Like
// a platform with idempotent posts (Discord's nonce with enforce_nonce, an
// Idempotency-Key header elsewhere), it shows a post whose key it has seen
// once, answers it as a success, and counts it as sent twice.
type platforms struct {
	mu         sync.Mutex
	run        uint64 // the run whose deliveries are recorded (plan's run)
	deliveries []delivery
	keys       map[string]bool // idempotency keys of the posts shown
	resent     int             // posts whose key was shown already
	earlier    int             // posts for messages of another run
	arrived    chan struct{}
	out        outage // --fault platform-down
	// refuse answers every post to some chats (by platform/chat, or
	// platform/* for all of a platform's) with a status, and a body like
	// Telegram's ("bot was blocked by the user" is its 403): a test's.
	// refusedPosts counts those posts, by kind.key.
	refuse       map[string]int
	refusedPosts map[string]int
}

// outage is a service refusing every call until a moment (a fault), and
// counting the calls it refused.
type outage struct {
	until   atomic.Int64 // UnixNano; 0: up
	refused atomic.Int64
}

// begin refuses every call for d from now.
func (o *outage) begin(d time.Duration) { o.until.Store(time.Now().Add(d).UnixNano()) }

// refuse reports whether a call now is refused, and counts it if it is.
func (o *outage) refuse() bool {
	if time.Now().UnixNano() >= o.until.Load() {
		return false
	}
	o.refused.Add(1)
	return true
}

func newPlatforms() *platforms {
	return &platforms{arrived: make(chan struct{}, 1), keys: map[string]bool{}}
}

// reset forgets what was delivered, before run, another run on the same
// topology.
func (p *platforms) reset(run uint64) {
	p.mu.Lock()
	p.run, p.deliveries, p.keys, p.resent, p.earlier = run, nil, map[string]bool{}, 0, 0
	p.mu.Unlock()
}

// ofRun reports whether a notification for message id may be run's: it is
// false only for a message ID of plan's form from another run. A deployment
// that outlives a run (--role load, or --nats-url) can still hold its work
// when the next run starts: a run stopped early, or whose driver stopped
// waiting, left jobs queued, and their replies arrive during the next one.
// They were routed by their own sessions, to their own run's chats, which
// this run cannot judge; counted as this run's, they would be misrouted
// (no message of this run has their ID) and settle the wait early. Any
// other ID is judged as this run's: one that is not a number plan makes is
// misrouted.
func ofRun(id string, run uint64) bool {
	n, err := strconv.ParseUint(id, 10, 64)
	r := n / runIDSpan
	return err != nil || r == run || r < minRun || r >= 10*minRun
}

func (p *platforms) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.out.refuse() {
		http.Error(w, "platform: unavailable (an outage injected by --fault)", http.StatusServiceUnavailable)
		return
	}
	var post platformPost
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&post); err != nil {
		http.Error(w, "platform: "+err.Error(), http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if post.EnforceNonce {
		key = post.Nonce
	}
	d := delivery{notification: post.notification, Platform: r.URL.Path[1:], At: time.Now()}
	p.mu.Lock()
	status := p.refuse[d.Platform+"/"+d.Origin.ChatID]
	if status == 0 {
		status = p.refuse[d.Platform+"/*"] // every chat of the platform
	}
	if status != 0 {
		if p.refusedPosts == nil {
			p.refusedPosts = map[string]int{}
		}
		p.refusedPosts[d.Kind+"."+d.Key]++
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"ok":false,"error_code":%d,"description":"%s: the stand-in platform refuses this chat"}`, status, http.StatusText(status))
		return
	}
	if !ofRun(d.ID, p.run) {
		p.earlier++ // answered as delivered: it is, to an earlier run's chat
		p.mu.Unlock()
		return
	}
	if key != "" {
		key = d.Platform + "/" + key
	}
	if key != "" && p.keys[key] {
		p.resent++
		p.mu.Unlock()
		return // already shown: the same answer, nothing new in the chat
	}
	if key != "" {
		p.keys[key] = true
	}
	p.deliveries = append(p.deliveries, d)
	p.mu.Unlock()
	select {
	case p.arrived <- struct{}{}:
	default:
	}
}

// summary is what the driver reports.
type summary struct {
	Store              string  `json:"session_store"`
	Sent               int     `json:"sent"`
	Conversations      int     `json:"conversations"`
	Expected           int     `json:"expected_deliveries"`
	Delivered          int     `json:"delivered"`
	Misrouted          int     `json:"misrouted"`
	Refused            int     `json:"refused"`
	ExpectedRefused    int     `json:"expected_refusals"`
	WronglyRefused     int     `json:"refused_wrongly"` // refused, though they had to be delivered: as good as lost
	FirstWrongRefusal  string  `json:"first_wrong_refusal,omitempty"`
	ForgedRefused      int     `json:"forged_refused"` // notifications whose session did not verify, never delivered
	NotPosted          int     `json:"not_posted"`     // the ingress refused them until the driver gave up
	PostedAgain        int     `json:"posted_again"`   // posted more than once: the ingress refused a post, or was not there
	EarlierRuns        int     `json:"earlier_runs"`   // notifications for messages of an earlier run, delivered or refused during this one: not judged
	Lost               int     `json:"lost"`
	Duplicates         int     `json:"duplicates"`           // shown twice in a chat
	RouterResends      int     `json:"sent_twice_by_router"` // posts the platform's idempotency key caught
	Interrupted        bool    `json:"interrupted,omitempty"`
	ToolMismatch       int     `json:"tool_saw_another_session"`
	DownstreamMismatch int     `json:"downstream_saw_another_session"`
	BrokenPromises     int     `json:"completions_to_stateless_channels"`
	Seconds            float64 `json:"seconds"`
	Throughput         float64 `json:"messages_per_second"`
	ReplyP50ms         float64 `json:"reply_latency_p50_ms"`
	ReplyP99ms         float64 `json:"reply_latency_p99_ms"`
	CompletionP50ms    float64 `json:"completion_latency_p50_ms"`
	CompletionP99ms    float64 `json:"completion_latency_p99_ms"`
	PeakRSSMiB         float64 `json:"peak_rss_mib"`
	Fault              *fault  `json:"fault,omitempty"`
	WorkersKilled      int     `json:"workers_killed,omitempty"` // --chaos: worker processes SIGKILLed and replaced
	// The latencies in full, a histogram each: from when a message was
	// posted (a burst) or due (an open loop) to its delivery.
	Reply      latencyStats `json:"reply_latency"`
	Completion latencyStats `json:"completion_latency"`
	OpenLoop   *openLoop    `json:"open_loop,omitempty"` // with --rate
	// OutOfTime is set when --timeout ended the wait for deliveries before
	// everything arrived and before a silence (driverConfig.idle) declared
	// the rest lost: what had not arrived is counted lost, but may only be
	// late.
	OutOfTime *outOfTime `json:"out_of_time,omitempty"`
}

// paceSample is how many deliveries and refusals had arrived at a moment of
// the wait.
type paceSample struct {
	at time.Time
	n  int
}

// outOfTimeAt describes a wait that --timeout ended: limit, the time since
// the last arrival, the counts settled during the wait (pace, in time order,
// the last at the end) and how many were still to come. The pace is taken
// over the wait's last 10 s, or the whole wait when shorter.
func outOfTimeAt(limit, sinceLast time.Duration, pace []paceSample, remaining int) *outOfTime {
	o := &outOfTime{TimeoutSeconds: limit.Seconds(), LastArrivalAgoMs: float64(sinceLast.Microseconds()) / 1000}
	if n := len(pace); n >= 2 {
		end := pace[n-1]
		from := 0
		for from < n-2 && end.at.Sub(pace[from+1].at) >= 10*time.Second {
			from++
		}
		if secs := end.at.Sub(pace[from].at).Seconds(); secs > 0 {
			o.ArrivingPerSecond = float64(end.n-pace[from].n) / secs
		}
	}
	if o.ArrivingPerSecond > 0 {
		o.RemainingEstimateS = math.Ceil(float64(remaining) / o.ArrivingPerSecond)
	}
	return o
}

func (s summary) ok() bool {
	return s.Misrouted == 0 && s.Lost == 0 && s.WronglyRefused == 0 && s.Duplicates == 0 && s.NotPosted == 0 && !s.Interrupted
}

func (s summary) String() string {
	notPosted, lost := "the ingress refused them until the driver gave up", ""
	switch {
	case s.Interrupted:
		notPosted, lost = "interrupted before they were posted, or while the ingress refused them", "   (not arrived when the run was interrupted)"
	case s.OutOfTime != nil && s.Lost > 0:
		lost = fmt.Sprintf("   (not arrived when the %v --timeout ran out: late or lost, see below)", s.OutOfTime.limit())
	}
	return fmt.Sprintf(`session store        %s
conversations        %d
messages sent        %d
deliveries expected  %d   (a reply each, and a completion for background work)
delivered            %d
misrouted            %d
refused              %d   (expected %d: replies and completions of scoped messages sent without their scope)
forged refused       %d   (notifications without a session signed by the gateway's key: never delivered)
not posted           %d   (%s)
lost                 %d%s
duplicates           %d   (shown twice in a chat)
sent twice           %d   (by the router; the platform's idempotency key showed them once)
tool saw another     %d   (child processes that read another conversation's session)
downstream saw other %d
throughput           %.0f messages/s   (%.1f s)
reply latency        p50 %.1f ms   p90 %.1f ms   p99 %.1f ms   max %.1f ms
completion latency   p50 %.1f ms   p90 %.1f ms   p99 %.1f ms   max %.1f ms
peak RSS             %.0f MiB (this process)
%s`, s.Store, s.Conversations, s.Sent, s.Expected, s.Delivered, s.Misrouted, s.Refused, s.ExpectedRefused, s.ForgedRefused, s.NotPosted, notPosted, s.Lost, lost,
		s.Duplicates, s.RouterResends, s.ToolMismatch, s.DownstreamMismatch, s.Throughput, s.Seconds,
		s.Reply.P50ms, s.Reply.P90ms, s.Reply.P99ms, s.Reply.MaxMs,
		s.Completion.P50ms, s.Completion.P90ms, s.Completion.P99ms, s.Completion.MaxMs, s.PeakRSSMiB, s.notes())
}

func (s summary) notes() string {
	var b strings.Builder
	if s.Reply.Count > 0 {
		fmt.Fprintf(&b, "reply latency histogram (%d replies)\n%s", s.Reply.Count, s.Reply.text("  "))
	}
	if o := s.OpenLoop; o != nil {
		verdict := "sustained: everything delivered, reply p99 under 1 s"
		if !o.Sustained {
			verdict = "NOT sustained: reply p99 of 1 s or more, or deliveries missing"
		}
		fmt.Fprintf(&b, "open loop            %.0f messages/s offered for %.0f s: %s\n", o.Rate, o.Seconds, verdict)
	}
	if f := s.Fault; f != nil {
		fmt.Fprintf(&b, "fault                %s at %.1f s: first delivery %.0f ms after it, longest pause %.0f ms; "+
			"%.0f deliveries/s before, %.0f after\n", f.What, f.AtSeconds, f.FirstDeliveryMs, f.LongestPauseMs, f.RateBefore, f.RateAfter)
	}
	if s.WronglyRefused > 0 {
		fmt.Fprintf(&b, "refused wrongly      %d   (replies and completions the router refused, though it had to deliver them;\n"+
			"                     the first: %s)\n", s.WronglyRefused, s.FirstWrongRefusal)
	}
	if s.EarlierRuns > 0 {
		fmt.Fprintf(&b, "earlier runs         %d   (replies and completions for messages an earlier run sent, left queued when it ended;\n"+
			"                     delivered or refused during this run, and not counted in it)\n", s.EarlierRuns)
	}
	if s.PostedAgain > 0 {
		fmt.Fprintf(&b, "posted again         %d   (messages the ingress refused or was not there to take at first; "+
			"posted again, each is queued once)\n", s.PostedAgain)
	}
	if s.Interrupted {
		b.WriteString("interrupted          the run was stopped before it finished: the figures cover what happened until then (lost: not arrived yet)\n")
	}
	if o := s.OutOfTime; o != nil && s.Lost > 0 {
		limit := o.limit()
		const indent = "\n                     "
		if o.ArrivingPerSecond > 0 {
			fmt.Fprintf(&b, "out of time          the %v --timeout ran out while deliveries were still arriving"+
				indent+"(%.0f a second at the end, the last %.0f ms before it): the %d counted lost"+
				indent+"may only be late; at that pace they needed about %.0f s more. Run again with a"+
				indent+"longer --timeout, such as --timeout %dm, to tell late from lost.\n",
				limit, o.ArrivingPerSecond, o.LastArrivalAgoMs, s.Lost, o.RemainingEstimateS, suggestTimeoutMinutes(limit, o.RemainingEstimateS))
		} else {
			fmt.Fprintf(&b, "out of time          the %v --timeout ran out %.0f ms after the last delivery, before the"+
				indent+"run declared the rest lost (after a silence): the %d counted lost may only be late."+
				indent+"Run again with a longer --timeout, such as --timeout %dm, to tell late from lost.\n",
				limit, o.LastArrivalAgoMs, s.Lost, suggestTimeoutMinutes(limit, limit.Seconds()/2))
		}
	}
	return b.String()
}

// outOfTime is how the wait for deliveries ended when --timeout ran out
// first.
type outOfTime struct {
	TimeoutSeconds     float64 `json:"timeout_seconds"`      // the wait's limit, --timeout
	LastArrivalAgoMs   float64 `json:"last_arrival_ago_ms"`  // from the last delivery or refusal to the end of the wait
	ArrivingPerSecond  float64 `json:"arriving_per_second"`  // over the wait's last 10 s
	RemainingEstimateS float64 `json:"remaining_estimate_s"` // at that pace, for what had not arrived
}

// limit is the wait's limit as a duration.
func (o *outOfTime) limit() time.Duration {
	return time.Duration(o.TimeoutSeconds * float64(time.Second))
}

// fault is a failure injected during a run, and what it cost.
type fault struct {
	What            string  `json:"what"`
	AtSeconds       float64 `json:"at_seconds"`                   // since the run started
	FirstDeliveryMs float64 `json:"first_delivery_after_ms"`      // from the fault to the next delivery
	LongestPauseMs  float64 `json:"longest_pause_after_ms"`       // between deliveries, from the fault on
	RateBefore      float64 `json:"deliveries_per_second_before"` // from the first delivery to the fault
	RateAfter       float64 `json:"deliveries_per_second_after"`  // from the first delivery after it to the last
}

// faultClock is where the fault injector says what it did and when.
type faultClock struct {
	mu   sync.Mutex
	what string
	at   time.Time
}

func (f *faultClock) set(what string) {
	f.mu.Lock()
	f.what, f.at = what, time.Now()
	f.mu.Unlock()
}

// then adds to what was done, after it was done: the time it was done
// stays the fault's.
func (f *faultClock) then(more string) {
	f.mu.Lock()
	f.what += more
	f.mu.Unlock()
}

func (f *faultClock) get() (string, time.Time) {
	if f == nil {
		return "", time.Time{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.what, f.at
}

// measure is what a fault at `at` cost the deliveries, in arrival order.
func measure(what string, start, at time.Time, ds []delivery) *fault {
	f := &fault{What: what, AtSeconds: at.Sub(start).Seconds()}
	var before int
	var first, prev, last time.Time
	var firstBefore time.Time
	var after int
	for _, d := range ds {
		if d.At.Before(at) {
			if before == 0 {
				firstBefore = d.At
			}
			before++
			continue
		}
		if first.IsZero() {
			first, prev = d.At, at
		}
		f.LongestPauseMs = max(f.LongestPauseMs, float64(d.At.Sub(prev).Microseconds())/1000)
		prev, last = d.At, d.At
		after++
	}
	if before > 1 && at.After(firstBefore) {
		f.RateBefore = float64(before) / at.Sub(firstBefore).Seconds()
	}
	if !first.IsZero() {
		f.FirstDeliveryMs = float64(first.Sub(at).Microseconds()) / 1000
		if after > 1 && last.After(first) {
			f.RateAfter = float64(after-1) / last.Sub(first).Seconds()
		}
	}
	return f
}

type driverConfig struct {
	ingressURL    string
	messages      int
	conversations int
	inFlight      int           // concurrent posts to the ingress
	timeout       time.Duration // for every expected delivery
	idle          time.Duration // give up earlier when nothing arrives for this long, of this run or an earlier one
	progress      io.Writer     // progress while posting and waiting (progress.go); nil for none
	rate          float64       // open loop: messages per second, each posted when due (openloop.go); 0: one burst
	posted        *atomic.Int64 // if set, counts the messages the ingress accepted
	faults        *faultClock   // if set, where a fault injector records what it did
	seed          uint64
	auth          webhookAuth // what each post carries to prove its platform
}

// drive sends the load and waits for its outcome.
func drive(ctx context.Context, cfg driverConfig, nc *nats.Conn, p *platforms) (summary, error) {
	run := newRun()
	p.reset(run)
	msgs := plan(cfg.messages, cfg.conversations, cfg.seed, run)
	byKey := make(map[string]*message, len(msgs))
	keys := make([]string, len(msgs))
	sum := summary{Sent: len(msgs), Conversations: cfg.conversations}
	for i := range msgs {
		keys[i] = msgs[i].key()
		byKey[keys[i]] = &msgs[i]
		r, c := msgs[i].expected()
		if r {
			sum.Expected++
		}
		if c {
			sum.Expected++
		}
		if msgs[i].conv.noScope { // its reply, and its completion if it asked for one
			sum.ExpectedRefused++
			if msgs[i].background {
				sum.ExpectedRefused++
			}
		}
	}
	var refusedMu sync.Mutex
	refused := map[string]string{} // kind.key: the router's reason
	forged := map[string]bool{}
	earlierRefused := 0
	sub, err := nc.Subscribe(refusedSubject, func(m *nats.Msg) {
		var r refusal
		if json.Unmarshal(m.Data, &r) == nil {
			refusedMu.Lock()
			switch {
			case r.Forged:
				forged[r.Kind+"."+r.ID] = true // the forger's words: never an expected refusal
			case !ofRun(r.ID, run):
				earlierRefused++
			default:
				refused[r.Kind+"."+r.Key] = r.Reason
			}
			refusedMu.Unlock()
		}
	})
	if err != nil {
		return sum, fmt.Errorf("subscribe to refusals: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return sum, fmt.Errorf("subscribe to refusals: %w", err)
	}

	start := time.Now()
	client := &http.Client{Timeout: 10 * time.Second}
	inFlight := cfg.inFlight
	if cfg.rate > 0 {
		inFlight = max(inFlight, openLoopInFlight)
	}
	sem := make(chan struct{}, inFlight)
	notPosted := make([]bool, len(msgs))
	var postErr onceLog
	postErr.who = "load"
	var wg sync.WaitGroup
	var posted, expected atomic.Int64 // for the progress reporter's goroutine
	var postedAgain atomic.Int64
	var posting atomic.Bool
	posting.Store(true)
	expected.Store(int64(sum.Expected))
	// settled counts the deliveries and refusals arrived so far.
	settled := func() (nDelivered, nRefused int) {
		p.mu.Lock()
		nDelivered = len(p.deliveries)
		p.mu.Unlock()
		refusedMu.Lock()
		nRefused = len(refused)
		refusedMu.Unlock()
		return nDelivered, nRefused
	}
	// others counts what else the deployment has answered: notifications of
	// an earlier run, and forgeries refused. While it still works through an
	// earlier run's backlog, this run's messages wait behind it, and a
	// silence from them alone is not loss.
	others := func() int {
		p.mu.Lock()
		n := p.earlier
		p.mu.Unlock()
		refusedMu.Lock()
		n += earlierRefused + len(forged)
		refusedMu.Unlock()
		return n
	}
	stopProgress := startProgress(cfg.progress, func() progressState {
		d, r := settled()
		return progressState{posting: posting.Load(), posted: int(posted.Load()), total: len(msgs), delivered: d, expected: int(expected.Load()), refused: r}
	})
	defer stopProgress()
	for i := range msgs {
		if cfg.rate > 0 {
			msgs[i].sentAt = due(start, i, cfg.rate)
			waitUntil(ctx, msgs[i].sentAt)
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			notPosted[i] = true // interrupted before it was sent
			continue
		}
		if cfg.rate <= 0 {
			msgs[i].sentAt = time.Now()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			tries, err := post(ctx, client, cfg.ingressURL, cfg.auth, msgs[i], start.Add(cfg.timeout))
			if tries > 1 {
				postedAgain.Add(1)
			}
			if err != nil {
				if ctx.Err() == nil { // after Ctrl-C every post in flight fails the same way: not news
					postErr.print(errors.New(strings.Replace(err.Error(), msgs[i].id, "a message", 1))) // once per kind
				}
				notPosted[i] = true
				return
			}
			posted.Add(1)
			if cfg.posted != nil {
				cfg.posted.Add(1)
			}
		})
	}
	wg.Wait()
	for i := range msgs {
		if !notPosted[i] {
			continue
		}
		sum.NotPosted++
		r, c := msgs[i].expected()
		sum.Expected -= btoi(r) + btoi(c)
		if msgs[i].conv.noScope {
			sum.ExpectedRefused -= 1 + btoi(msgs[i].background)
		}
	}
	sum.PostedAgain = int(postedAgain.Load())
	expected.Store(int64(sum.Expected))
	posting.Store(false)

	// Wait for every expected delivery and refusal.
	deadline := time.After(cfg.timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastChange := -1, time.Now()
	// pace holds the counts settled, sampled about once a second, for the
	// rate at which deliveries were still arriving if the time runs out.
	var pace []paceSample
wait:
	for {
		d, r := settled()
		if d >= sum.Expected && r >= sum.ExpectedRefused {
			break
		}
		if a := d + r + others(); a != last {
			last, lastChange = a, time.Now()
		} else if cfg.idle > 0 && time.Since(lastChange) > cfg.idle {
			break // nothing more is coming: the rest is lost
		}
		select {
		case <-p.arrived:
		case now := <-tick.C:
			pace = append(pace, paceSample{now, d + r})
		case <-deadline:
			sum.OutOfTime = outOfTimeAt(cfg.timeout, time.Since(lastChange), append(pace, paceSample{time.Now(), d + r}),
				sum.Expected+sum.ExpectedRefused-(d+r))
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	if ctx.Err() != nil {
		sum.Interrupted = true
	} else {
		// Late duplicates would arrive just after: give them a moment.
		time.Sleep(300 * time.Millisecond)
	}
	elapsed := time.Since(start)
	stopProgress()

	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[string]int{}
	var replyLat, complLat []float64
	for _, d := range p.deliveries {
		m, ok := byKey[d.Key]
		if !ok || m.id != d.ID {
			sum.Misrouted++ // no message of this run, or a key moved onto another message's id
			continue
		}
		sum.Delivered++
		key := d.Kind + "." + d.Key
		if seen[key]++; seen[key] > 1 {
			sum.Duplicates++
			continue
		}
		platform, chat, thread, parent, anchor, scope := m.route()
		if d.Kind == "reply" {
			if d.ToolSaw != thread {
				sum.ToolMismatch++
			}
			if d.DownstreamSaw != thread {
				sum.DownstreamMismatch++
			}
		}
		o := d.Origin
		if d.Platform != platform || o.ChatID != chat || o.ThreadID != thread || o.ParentChatID != parent ||
			o.MessageID != anchor || o.ScopeID != scope || o.UserID != m.user() || (o.ChatType == "dm") != m.conv.dm {
			sum.Misrouted++
			continue
		}
		if d.Kind == "completion" && m.conv.platform == "api" {
			sum.BrokenPromises++
		}
		if d.Kind == "reply" {
			replyLat = append(replyLat, float64(d.At.Sub(m.sentAt).Microseconds())/1000)
		} else {
			complLat = append(complLat, float64(d.At.Sub(m.sentAt).Microseconds())/1000)
		}
	}
	refusedMu.Lock()
	sum.Refused, sum.ForgedRefused = len(refused), len(forged)
	sum.EarlierRuns = earlierRefused
	refusedMu.Unlock()
	for i := range msgs {
		if notPosted[i] {
			continue
		}
		r, c := msgs[i].expected()
		for _, k := range [...]struct {
			kind string
			want bool
		}{{"reply.", r}, {"completion.", c}} {
			kind, want := k.kind, k.want
			key := kind + keys[i]
			why, wasRefused := refused[key]
			switch {
			case !want || seen[key] > 0:
			case wasRefused:
				if sum.WronglyRefused++; sum.FirstWrongRefusal == "" {
					sum.FirstWrongRefusal = fmt.Sprintf("%s %s: %s", strings.TrimSuffix(kind, "."), msgs[i].id, why)
				}
			default:
				sum.Lost++
			}
		}
	}
	sum.Misrouted += sum.BrokenPromises
	sum.Seconds = elapsed.Seconds()
	sum.Throughput = float64(len(msgs)) / elapsed.Seconds()
	sum.ReplyP50ms, sum.ReplyP99ms = percentile(replyLat, 50), percentile(replyLat, 99)
	sum.CompletionP50ms, sum.CompletionP99ms = percentile(complLat, 50), percentile(complLat, 99)
	sum.Reply, sum.Completion = newLatencyStats(replyLat), newLatencyStats(complLat)
	if cfg.rate > 0 {
		sum.OpenLoop = &openLoop{Rate: cfg.rate, Seconds: float64(len(msgs)) / cfg.rate,
			Sustained: sum.ok() && sum.Delivered == sum.Expected && sum.Reply.P99ms < float64(sustainableP99.Milliseconds())}
	}
	sum.PeakRSSMiB = peakRSSMiB()
	sum.RouterResends = p.resent
	sum.EarlierRuns += p.earlier
	if what, at := cfg.faults.get(); !at.IsZero() {
		sum.Fault = measure(what, start, at, p.deliveries)
	}
	return sum, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// post sends one message to the ingress, and says how many times it did. A
// refusal that may pass (503 while the gateway's queue elects a new leader,
// 429, a lost connection, a gateway not listening) is tried again, backing
// off from 100 ms to 2 s, until the deadline: the message id makes a
// repeated post queue the message once. A 4xx is final.
func post(ctx context.Context, client *http.Client, ingressURL string, auth webhookAuth, m message, deadline time.Time) (tries int, _ error) {
	platform, body := m.body()
	b, err := json.Marshal(body)
	if err != nil {
		return 0, fmt.Errorf("encode message %s: %w", m.id, err)
	}
	wait := 100 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ingressURL+"/v1/"+platform+"/messages", bytes.NewReader(b))
		if err != nil {
			return tries, fmt.Errorf("build the post of message %s: %w", m.id, err)
		}
		req.Header.Set("Content-Type", "application/json")
		auth.sign(platform, req.Header, b)
		tries++
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusAccepted:
				return tries, nil
			case resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
				return tries, fmt.Errorf("the ingress refused message %s: %s", m.id, resp.Status)
			}
			err = fmt.Errorf("the ingress answered %s", resp.Status)
		}
		if ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return tries, fmt.Errorf("post message %s: %w (gave up)", m.id, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func percentile(v []float64, p int) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[min(len(v)-1, len(v)*p/100)]
}

// peakRSSMiB reads this process's peak resident set size (Linux).
func peakRSSMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var kb float64
		if n, _ := fmt.Sscanf(string(line), "VmHWM: %f kB", &kb); n == 1 {
			return kb / 1024
		}
	}
	return 0
}

// suggestTimeoutMinutes is a --timeout, in whole minutes, that leaves room
// for what was still to come at the pace it was arriving (remainingS
// seconds): limit and twice that, rounded up.
func suggestTimeoutMinutes(limit time.Duration, remainingS float64) int {
	return int((limit+time.Duration(2*remainingS*float64(time.Second)))/time.Minute) + 1
}
