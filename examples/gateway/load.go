package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// conversation is one chat thread the load driver talks in.
type conversation struct {
	platform                    string
	chat, thread, parent, scope string
	noScope                     bool // a scoped platform's message that lost its scope: must be refused
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
		u.From.ID, u.From.FirstName, u.Text, u.Background = 4242, "Ada", "hi", m.background
		return "telegram", u
	case "discord":
		d := discordMessage{ID: m.id, ChannelID: c.chat, ParentID: c.parent, Content: "hi", Background: m.background}
		if !c.noScope {
			d.GuildID = c.scope
		}
		d.Author.ID, d.Author.Username = "u1", "grace"
		return "discord", d
	case "slack":
		e := slackEvent{Channel: c.chat, ThreadTS: c.thread, TS: m.id, User: "U1", Text: "hi", Background: m.background}
		if !c.noScope {
			e.Team = c.scope
		}
		return "slack", e
	}
	return "api", apiRequest{RequestID: m.id, User: "svc", Input: "hi", Background: m.background}
}

// plan builds n messages over conv conversations, interleaved: every
// conversation has messages in flight at once.
func plan(n, conv int, seed uint64) []message {
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
			c.scope, c.parent, c.chat = fmt.Sprint("guild-", i%7), fmt.Sprint("chan-", i), fmt.Sprint("thread-", i)
			c.thread = c.chat
		case "slack":
			c.scope, c.chat, c.thread = fmt.Sprint("T", i%5), fmt.Sprint("C", i), fmt.Sprintf("1733140%d.000100", i)
		}
		convs[i] = c
	}
	msgs := make([]message, n)
	for i := range msgs {
		c := convs[r.IntN(conv)]
		if c.platform != "telegram" && c.platform != "api" && r.IntN(50) == 0 {
			c.noScope = true // about 2% of scoped messages lose their scope on the way in
		}
		msgs[i] = message{id: fmt.Sprint(seed*10_000_000 + uint64(i)), conv: c, background: r.IntN(4) == 0}
	}
	return msgs
}

// platforms stands in for the chat APIs: it records what it is sent.
type platforms struct {
	mu         sync.Mutex
	deliveries []delivery
	arrived    chan struct{}
}

func newPlatforms() *platforms { return &platforms{arrived: make(chan struct{}, 1)} }

// reset forgets what was delivered, before another run on the same topology.
func (p *platforms) reset() {
	p.mu.Lock()
	p.deliveries = nil
	p.mu.Unlock()
}

func (p *platforms) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var d delivery
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&d.notification); err != nil {
		http.Error(w, "platform: "+err.Error(), http.StatusBadRequest)
		return
	}
	d.Platform, d.At = r.URL.Path[1:], time.Now()
	p.mu.Lock()
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
	ForgedRefused      int     `json:"forged_refused"` // notifications whose session did not verify, never delivered
	Lost               int     `json:"lost"`
	Duplicates         int     `json:"duplicates"`
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
}

func (s summary) ok() bool { return s.Misrouted == 0 && s.Lost == 0 && s.Duplicates == 0 }

func (s summary) String() string {
	return fmt.Sprintf(`session store        %s
conversations        %d
messages sent        %d
deliveries expected  %d   (a reply each, and a completion for background work)
delivered            %d
misrouted            %d
refused              %d   (expected %d: replies and completions of scoped messages sent without their scope)
forged refused       %d   (notifications without a session signed by the gateway's key: never delivered)
lost                 %d
duplicates           %d
tool saw another     %d   (child processes that read another conversation's session)
downstream saw other %d
throughput           %.0f messages/s   (%.1f s)
reply latency        p50 %.1f ms   p99 %.1f ms
completion latency   p50 %.1f ms   p99 %.1f ms
peak RSS             %.0f MiB (this process)
`, s.Store, s.Conversations, s.Sent, s.Expected, s.Delivered, s.Misrouted, s.Refused, s.ExpectedRefused, s.ForgedRefused, s.Lost,
		s.Duplicates, s.ToolMismatch, s.DownstreamMismatch, s.Throughput, s.Seconds, s.ReplyP50ms, s.ReplyP99ms,
		s.CompletionP50ms, s.CompletionP99ms, s.PeakRSSMiB)
}

type driverConfig struct {
	ingressURL    string
	messages      int
	conversations int
	inFlight      int           // concurrent posts to the ingress
	timeout       time.Duration // for every expected delivery
	idle          time.Duration // give up earlier when nothing new arrives for this long
	progress      io.Writer     // a progress line per second; nil for none
	seed          uint64
}

// drive sends the load and waits for its outcome.
func drive(ctx context.Context, cfg driverConfig, nc *nats.Conn, p *platforms) (summary, error) {
	p.reset()
	msgs := plan(cfg.messages, cfg.conversations, cfg.seed)
	byID := make(map[string]*message, len(msgs))
	sum := summary{Sent: len(msgs), Conversations: cfg.conversations}
	for i := range msgs {
		byID[msgs[i].id] = &msgs[i]
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
	refused := map[string]bool{}
	forged := map[string]bool{}
	sub, err := nc.Subscribe(refusedSubject, func(m *nats.Msg) {
		var r refusal
		if json.Unmarshal(m.Data, &r) == nil {
			refusedMu.Lock()
			if r.Forged {
				forged[r.Kind+"."+r.ID] = true // the forger's words: never an expected refusal
			} else {
				refused[r.Kind+"."+r.ID] = true
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
	sem := make(chan struct{}, cfg.inFlight)
	var sendErr error
	var errMu sync.Mutex
	var wg sync.WaitGroup
	for i := range msgs {
		sem <- struct{}{}
		msgs[i].sentAt = time.Now()
		wg.Go(func() {
			defer func() { <-sem }()
			platform, body := msgs[i].body()
			b, _ := json.Marshal(body)
			resp, err := client.Post(cfg.ingressURL+"/v1/"+platform+"/messages", "application/json", bytes.NewReader(b))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					err = fmt.Errorf("the ingress answered %s for message %s", resp.Status, msgs[i].id)
				}
			}
			if err != nil {
				errMu.Lock()
				if sendErr == nil {
					sendErr = err
				}
				errMu.Unlock()
			}
		})
	}
	wg.Wait()
	if sendErr != nil {
		return sum, fmt.Errorf("send the load: %w", sendErr)
	}

	// Wait for every expected delivery and refusal, printing progress.
	deadline := time.After(cfg.timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	settled := func() (int, int) {
		p.mu.Lock()
		n := len(p.deliveries)
		p.mu.Unlock()
		refusedMu.Lock()
		r := len(refused)
		refusedMu.Unlock()
		return n, r
	}
	last, lastChange := -1, time.Now()
wait:
	for {
		d, r := settled()
		if d >= sum.Expected && r >= sum.ExpectedRefused {
			break
		}
		if d+r != last {
			last, lastChange = d+r, time.Now()
		} else if cfg.idle > 0 && time.Since(lastChange) > cfg.idle {
			break // nothing more is coming: the rest is lost
		}
		select {
		case <-p.arrived:
		case <-tick.C:
			if cfg.progress != nil {
				fmt.Fprintf(cfg.progress, "\rsent %d  delivered %d/%d  refused %d  %.0fs ", len(msgs), d, sum.Expected, r, time.Since(start).Seconds())
			}
		case <-deadline:
			break wait
		case <-ctx.Done():
			return sum, ctx.Err()
		}
	}
	// Late duplicates would arrive just after: give them a moment.
	time.Sleep(300 * time.Millisecond)
	elapsed := time.Since(start)
	if cfg.progress != nil {
		fmt.Fprintf(cfg.progress, "\r%60s\r", "")
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[string]int{}
	var replyLat, complLat []float64
	for _, d := range p.deliveries {
		m, ok := byID[d.ID]
		if !ok {
			sum.Misrouted++
			continue
		}
		sum.Delivered++
		key := d.Kind + "." + d.ID
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
			o.MessageID != anchor || o.ScopeID != scope {
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
	refusedMu.Unlock()
	for i := range msgs {
		r, c := msgs[i].expected()
		if r && seen["reply."+msgs[i].id] == 0 && !refused["reply."+msgs[i].id] {
			sum.Lost++
		}
		if c && seen["completion."+msgs[i].id] == 0 && !refused["completion."+msgs[i].id] {
			sum.Lost++
		}
	}
	sum.Misrouted += sum.BrokenPromises
	sum.Seconds = elapsed.Seconds()
	sum.Throughput = float64(len(msgs)) / elapsed.Seconds()
	sum.ReplyP50ms, sum.ReplyP99ms = percentile(replyLat, 50), percentile(replyLat, 99)
	sum.CompletionP50ms, sum.CompletionP99ms = percentile(complLat, 50), percentile(complLat, 99)
	sum.PeakRSSMiB = peakRSSMiB()
	return sum, nil
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
