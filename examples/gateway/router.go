package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

// scoped platforms cannot deliver a reply without its tenant, which decides
// whose credentials may post it: a channel's is its scope (a guild or a
// workspace), a direct message's its user (userBound).
var scoped = map[string]bool{"discord": true, "slack": true}

// userBound reports whether o is a direct message with its user: a Discord
// DM has no guild, and its reply is posted for that user. Like the rest of
// the route, both come from the signed session.
func userBound(o otelsession.Origin) bool { return o.ChatType == "dm" && o.UserID != "" }

type router struct {
	store       string
	cons        *natssession.Consumer // verifies the signed session of every notification
	ackWait     time.Duration
	ackPending  int // each consumer's maxAckPending; 0: maxAckPending
	js          jetstream.JetStream
	nc          *nats.Conn
	kv          jetstream.KeyValue
	platformURL string // base URL; the platform's name is appended
	tracer      trace.Tracer
	client      *http.Client
	inFlight    sync.Map // keys being delivered by this process
	errs        onceLog
	refusals    onceLog  // every refusal, once per class in 30 s with a count
	platforms   breakers // one per platform
	judge       refusalJudge
}

// refusalJudge tells a platform's final answer about one delivery (a chat
// that does not exist, a bot its user blocked) from the same answer about
// the router's way to the platform: a mistyped --platform-url, a wrong API
// path, answered 404 for every chat. Taken as final, every reply was
// thrown away until the router was fixed (a router run for 20 s with a
// mistyped URL refused 72 deliveries for good). One chat refused is taken
// at its word, as a platform used by one chat may refuse it before it
// takes anything; refusals of more chats in a row are doubted: a second
// chat refused before the platform took any delivery since this router
// started, or a breakerTrips-th since its last. A doubted answer is a
// failure, retried and counted by the breaker like a 5xx, until a
// delivery goes through. So a wrong URL throws away at most the first
// chat's deliveries.
type refusalJudge struct {
	mu sync.Mutex
	m  map[string]*platformRecord
}

type platformRecord struct {
	delivered bool            // a delivery went through since the router started
	refused   map[string]bool // chats refused since the last delivery
}

func (j *refusalJudge) of(platform string) *platformRecord {
	if j.m == nil {
		j.m = map[string]*platformRecord{}
	}
	r := j.m[platform]
	if r == nil {
		r = &platformRecord{}
		j.m[platform] = r
	}
	return r
}

// delivered records a delivery that went through.
func (j *refusalJudge) delivered(platform string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.of(platform)
	r.delivered, r.refused = true, nil
}

// refused records platform's final answer code to a delivery for chat, and
// says why it is not to be trusted as final ("" when it is).
func (j *refusalJudge) refused(platform, chat string, code int) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.of(platform)
	if r.refused == nil {
		r.refused = map[string]bool{}
	}
	r.refused[chat] = true
	if !r.delivered && len(r.refused) > 1 {
		return fmt.Sprintf("%s refused %d chats and has taken no delivery since this router started; if it answers %d to every chat, check --platform-url", platform, len(r.refused), code)
	}
	if len(r.refused) >= breakerTrips {
		return fmt.Sprintf("%s refused %d chats in a row and took nothing since; if it answers %d to every chat, check --platform-url", platform, len(r.refused), code)
	}
	return ""
}

func newRouter(store string, verifier *propagation.Verifier, js jetstream.JetStream, nc *nats.Conn, platformURL string, tp *sdktrace.TracerProvider) *router {
	return &router{
		store: store,
		// No publisher is trusted as such: anyone who can publish to the
		// replies subject could otherwise send a reply to any thread.
		cons: natssession.NewConsumer(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier)),
			natssession.WithTracerProvider(tp), natssession.WithPropagator(propagatorFor(store))),
		js: js, nc: nc, platformURL: platformURL, tracer: tp.Tracer("gateway/router"),
		client:   &http.Client{Timeout: 10 * time.Second},
		refusals: onceLog{who: "router", like: "refusals"},
	}
}

// run delivers replies and completions until ctx ends. It calls ready once
// it is consuming; an error before that is returned at once.
func (rt *router) run(ctx context.Context, ackWait time.Duration, concurrency int, ready func()) error {
	rt.ackWait, rt.errs.who = ackWait, "router"
	// Opened with retries, like the consumer (see consumer): the bucket's
	// leader may be the node just lost.
	err := retry(ctx, setupDeadline, func(ctx context.Context) error {
		kv, err := rt.js.KeyValue(ctx, deliveredKV)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return permanent{err}
		}
		if err != nil {
			rt.errs.print(fmt.Errorf("open bucket %s: %w (trying again)", deliveredKV, err))
			return err
		}
		rt.kv = kv
		return nil
	})
	if err != nil {
		return fmt.Errorf("router: open bucket %s: %w", deliveredKV, err)
	}
	// Each platform's notifications through a consumer and a pool of their
	// own (see replySubject): a platform that is down or slow holds up its
	// own deliveries only.
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for _, rc := range routerConsumers() {
		cons, err := consumer(ctx, rt.js, "router", repliesStream, rc.name, ackWait, rc.filters, rt.ackPending)
		if err != nil {
			return fmt.Errorf("router: %w", err)
		}
		p := newPool(concurrency)
		cc, err := cons.Consume(p.handler(rt.handle), consumeOptions("router", concurrency)...) // see worker.run
		if err != nil {
			return fmt.Errorf("router: consume notifications (%s): %w", rc.name, err)
		}
		stops = append(stops, func() { cc.Stop(); p.close() })
	}
	ready()
	<-ctx.Done()
	return nil
}

func (rt *router) handle(msg jetstream.Msg) {
	defer keepAlive(msg, rt.ackWait)()
	var n notification
	if err := json.Unmarshal(msg.Data(), &n); err != nil {
		// Origin validates while it decodes: a corrupt or forged record stops here.
		rt.refuse(n, "undecodable", "undecodable: "+err.Error())
		_ = msg.Term()
		return
	}
	ctx, ok := rt.route(msg, &n)
	if !ok {
		return // refused and terminated, or put back for another router
	}
	if !keyedAs(msg, n.Kind+"-", n.Key) {
		// Its delivery could not be recorded, or not under the key it was
		// queued (and signed) for: refused rather than risk showing it twice.
		rt.refuse(n, "malformed key", fmt.Sprintf("message key %q malformed or not the one it was queued under", n.Key))
		_ = msg.Term()
		return
	}
	// The delivering span belongs to the conversation; a completion links
	// back to the turn that promised it.
	opts := []trace.SpanStartOption{}
	if n.Kind == "completion" {
		opts = append(opts, trace.WithLinks(n.Origin.Link()))
	}
	ctx, span := rt.tracer.Start(ctx, "deliver "+n.Kind, opts...)
	defer span.End()

	key := n.Kind + "." + n.Key
	if _, busy := rt.inFlight.LoadOrStore(key, struct{}{}); busy {
		_ = msg.NakWithDelay(time.Second) // the same notification is being delivered right now
		return
	}
	defer rt.inFlight.Delete(key)
	switch _, err := rt.kv.Get(ctx, key); {
	case err == nil:
		// Delivered already, or refused by its platform for good: a
		// redelivery after a crash or a lost acknowledgement, or a retried
		// publish.
		_ = msg.Ack()
		return
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		// Unknown whether it was delivered (the bucket has no leader right
		// now): ask again later rather than guess.
		rt.errs.print(fmt.Errorf("read a delivery record: %w (asking again later)", err))
		_ = msg.NakWithDelay(500 * time.Millisecond)
		return
	}
	switch {
	case n.Origin.Platform == "" || n.Origin.ChatID == "":
		rt.refuse(n, "no route", "no platform or chat to deliver to")
		_ = msg.Ack()
		return
	case scoped[n.Origin.Platform] && n.Origin.ScopeID == "" && !userBound(n.Origin):
		// Fail closed: a scoped reply without its scope is never sent to a default.
		rt.refuse(n, "no scope", "scoped platform without a scope, and not a direct message to a user")
		_ = msg.Ack()
		return
	case n.Kind == "completion" && n.Origin.Platform == "api_server":
		rt.refuse(n, "stateless completion", "a stateless channel cannot receive a completion")
		_ = msg.Ack()
		return
	}
	// A platform's final refusal (final) is an answer: the platform is up,
	// so its breaker counts it as a call that went through, and one chat
	// whose deliveries it keeps refusing does not shut the others out.
	// A 429 is an answer too: the platform limits this bot or this chat
	// (Telegram limits each chat), it is not down; the delivery is tried
	// again when the platform says, without opening its breaker.
	// A final answer that looks like every chat's rather than this one's
	// (see refusalJudge) is a failure like a 5xx.
	var final, limited *platformAnswer
	chat := n.Origin.ScopeID + "/" + n.Origin.ChatID
	err := rt.platforms.of(n.Origin.Platform).callFor(chat, func() error {
		err := rt.deliver(ctx, n)
		a := (*platformAnswer)(nil)
		switch {
		case err == nil:
			rt.judge.delivered(n.Origin.Platform)
		case errors.As(err, &a) && a.final():
			if doubt := rt.judge.refused(n.Origin.Platform, chat, a.code); doubt != "" {
				return fmt.Errorf("%w, not taken as final: %s", err, doubt)
			}
			final = a
			return nil
		case a != nil && a.code == http.StatusTooManyRequests:
			limited = a
			return nil
		}
		return err
	})
	if limited != nil {
		err = limited
	}
	if err != nil {
		if errors.Is(err, errNotCalled) {
			err = fmt.Errorf("deliver %s %s to %s: %w", n.Kind, n.ID, n.Origin.Platform, err)
		}
		// A platform that is down fails every delivery to it the same way:
		// one line per platform and kind of failure, so that one failure
		// does not hide another (a 503 behind the breaker's refusals).
		rt.errs.printAs("deliver: "+n.Origin.Platform+": "+failureClass(err), fmt.Errorf("%w (trying it again)", err))
		wait := retryAfter(msg)
		if a := (*platformAnswer)(nil); errors.As(err, &a) {
			wait = max(wait, a.wait) // its Retry-After
		}
		_ = msg.NakWithDelay(jitter(wait))
		return
	}
	if final != nil {
		rt.refusedByPlatform(ctx, msg, n, key, final)
		return
	}
	// Acknowledge only a delivery that is recorded: an unrecorded one would
	// be sent again by whoever gets the message next, with nothing to stop
	// it but the platform's idempotency key. So the record is retried, and
	// if it still fails the message is left to be redelivered.
	if err := retry(ctx, publishDeadline, func(ctx context.Context) error {
		_, err := rt.kv.Put(ctx, key, []byte("1"))
		return err
	}); err != nil {
		fmt.Fprintf(os.Stderr, "router: record the delivery of %s %s (%s): %v (it will be redelivered)\n", n.Kind, n.ID, key, err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if err := msg.Ack(); err != nil {
		// Recorded: a redelivery finds the record and is acknowledged then.
		rt.errs.print(fmt.Errorf("acknowledge a recorded delivery: %w", err))
	}
}

// idempotencyKey names one delivery for the platform, from the job's message
// key: a platform that honours it shows a delivery sent twice only once.
func idempotencyKey(n notification) string { return n.Kind + "-" + n.Key }

// platformPost is what the router posts. Discord's create-message call takes
// the key as `nonce` and, with `enforce_nonce`, returns the message already
// created with that nonce instead of posting it again; the others get it in
// an Idempotency-Key header.
type platformPost struct {
	notification
	Nonce        string `json:"nonce,omitempty"`
	EnforceNonce bool   `json:"enforce_nonce,omitempty"`
}

// route decides where n goes, and the context its delivery runs in. With
// sessions (the baggage store), the route is the signed session of the
// message and nothing else: the origin in the body is anybody's to write, so
// a notification without a session that verifies is refused as forged and
// terminated (route reports false), and its body's origin replaced. Without
// sessions (--propagation off, the env store), the body is all there is.
//
// A signature that fails only for its key (another key id, or a MAC that
// does not match) is a forgery, or this router was started with another
// SESSIONWIRE_SIGNING_KEY than the workers': it is put back for another
// router for up to unverifiedPatience, as a worker does with a job
// (heldForAnotherKey), and refused as forged only then. A router with
// another key beside a right one used to terminate every notification it
// pulled: 120 of 227 were lost.
func (rt *router) route(msg jetstream.Msg, n *notification) (context.Context, bool) {
	if rt.store != storeBaggage {
		ctx := n.Origin.Bind(otelsession.Reset(context.Background()))
		if sc, ok := n.Origin.SpanContext(); ok && n.Kind != "completion" {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
		return ctx, true
	}
	ctx, span, err := rt.cons.ExtractJetStream(context.Background(), msg)
	span.End()
	if err != nil || !hasRoute(ctx) {
		if heldForAnotherKey(&rt.errs, msg, "router", "workers'", "delivering", "notification",
			unverifiedWhere(msg, "notification", n.ID), err) {
			return nil, false
		}
		reason := "forged: no signed session (a forgery, or a worker not started with --session-store baggage as this router was)"
		switch {
		case errors.Is(err, propagation.ErrSignatureExpired):
			reason = "expired: it waited in the queue longer than --max-wait, or its signer's clock is wrong: " + err.Error()
		case signedWithAnotherKey(err):
			reason = fmt.Sprintf("forged: no router verified its signature within %v: %v", unverifiedPatience, err)
		case err != nil:
			reason = "forged: " + err.Error()
		}
		rt.refuseForged(*n, reason)
		_ = msg.Term() // never delivered, never redelivered
		return nil, false
	}
	verified := otelsession.OriginFrom(ctx)
	verified.TraceParent, verified.TraceState = n.Origin.TraceParent, n.Origin.TraceState
	n.Origin = verified
	return ctx, true
}

func (rt *router) deliver(ctx context.Context, n notification) error {
	post := platformPost{notification: n}
	if n.Origin.Platform == "discord" {
		post.Nonce, post.EnforceNonce = idempotencyKey(n), true
	}
	b, err := json.Marshal(post)
	if err != nil {
		return fmt.Errorf("encode the %s for %s: %w", n.Kind, n.ID, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rt.platformURL+"/"+n.Origin.Platform, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("build the delivery of %s: %w", n.ID, err)
	}
	if n.Origin.Platform != "discord" {
		req.Header.Set("Idempotency-Key", idempotencyKey(n))
	}
	resp, err := rt.client.Do(req)
	if err != nil {
		return fmt.Errorf("deliver %s %s to %s: %w", n.Kind, n.ID, n.Origin.Platform, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096)) // read to the end, or nearly: the connection is reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	a := &platformAnswer{kind: n.Kind, id: n.ID, platform: n.Origin.Platform, code: resp.StatusCode, status: resp.Status, body: excerpt(body)}
	if a.code == http.StatusTooManyRequests || a.code == http.StatusServiceUnavailable {
		a.wait = retryAfterHeader(resp.Header.Get("Retry-After"), time.Now())
	}
	return a
}

// platformAnswer is a platform's answer to a delivery other than a success.
type platformAnswer struct {
	kind, id, platform string
	code               int
	status             string        // as the platform sent it: "403 Forbidden"
	body               string        // the start of its body, printable
	wait               time.Duration // its Retry-After, on a 429 or a 503
}

func (a *platformAnswer) Error() string {
	s := fmt.Sprintf("deliver %s %s to %s: it answered %s", a.kind, a.id, a.platform, a.status)
	if a.body != "" {
		s += ": " + a.body
	}
	return s
}

// final reports whether the answer says this delivery can never succeed.
func (a *platformAnswer) final() bool { return finalStatus(a.code) }

// finalStatus reports whether a platform answering a delivery with status
// says that it can never succeed, however often it is sent: a 4xx about
// this request, such as a chat that does not exist, a bot its user blocked
// (Telegram's 403), a channel the bot may not post in, a message too long.
// Sent again, it is refused again; retried, it used to count against its
// platform's breaker until one such chat stopped every delivery to the
// platform. These 4xx are not final:
//
//   - 408 Request Timeout and 429 Too Many Requests: sent later, it passes;
//   - 409 Conflict: the IETF Idempotency-Key draft's answer while a request
//     with the same key is still being processed (the router sends one with
//     every delivery); the retry gets the first request's answer;
//   - 425 Too Early (RFC 8470): the request may be sent again later;
//   - 401 Unauthorized and 407 Proxy Authentication Required: the gateway's
//     credentials for the platform, or its proxy, are wrong. That is every
//     delivery to the platform, not this one: the breaker holds them back
//     until the credentials are fixed, and then they all go, instead of
//     every reply being thrown away meanwhile.
//
// 5xx, a redirect the client did not follow (a 3xx), and no answer at all
// are not final either: the platform, or the way to it, may recover.
func finalStatus(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusProxyAuthRequired, http.StatusRequestTimeout, http.StatusConflict,
		http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500
}

// failureClass names the kind of a failed delivery in the log: the status a
// platform answered, a breaker that let no call through, or no answer.
func failureClass(err error) string {
	if a := (*platformAnswer)(nil); errors.As(err, &a) {
		return strconv.Itoa(a.code)
	}
	if errors.Is(err, errNotCalled) {
		return "breaker open"
	}
	return "no answer"
}

// maxRetryAfter bounds the wait a platform's Retry-After header can impose
// on one delivery: a longer one is asked for again on the next try.
const maxRetryAfter = time.Minute

// jitter spreads a retry's wait over 75% to 125% of d. Without it the
// deliveries a platform keeps failing come back in step with its breaker's
// pause (both end at 5 s): one failing chat's delivery was always the first
// call after the pause, the breaker's probe, which failed and shut it
// again, and no other chat of the platform was delivered for minutes.
func jitter(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2+1)
}

// retryAfterHeader is the wait a Retry-After header asks for, in seconds
// (Discord's may have a fraction) or as an HTTP date, at most
// maxRetryAfter; 0 without a header it can read.
func retryAfterHeader(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.ParseFloat(h, 64); err == nil {
		if !(s > 0) { // NaN too
			return 0
		}
		d = time.Duration(min(s, maxRetryAfter.Seconds()) * float64(time.Second))
	} else if t, err := http.ParseTime(h); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// excerpt is the start of a platform's answer, fit for one log line.
func excerpt(b []byte) string {
	s := printable(strings.TrimSpace(string(b)))
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}

// printable is s, which a sender or a platform wrote, on one log line: a
// line break or a tab is a space, and what could disguise the line
// (control and formatting characters, invalid UTF-8) is U+FFFD.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == ' ' || unicode.IsPrint(r):
			return r
		case unicode.IsSpace(r):
			return ' '
		}
		return '\uFFFD'
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// refusedByPlatform settles a delivery its platform refused for good. It is
// not retried: the refusal is recorded under the delivery's key, as a
// delivery is, so that a redelivery of the message (a lost Term, a router
// restarted before it) is acknowledged without posting it again; it is
// reported and logged like the router's own refusals, and the message is
// terminated, with the platform's answer as the reason (JetStream's
// advisory carries it). Nothing was shown: if the record fails, the message
// is terminated all the same, and at worst a redelivery asks the platform
// once more.
func (rt *router) refusedByPlatform(ctx context.Context, msg jetstream.Msg, n notification, key string, a *platformAnswer) {
	if err := retry(ctx, publishDeadline, func(ctx context.Context) error {
		_, err := rt.kv.Put(ctx, key, []byte("refused: "+a.status))
		return err
	}); err != nil {
		rt.errs.print(fmt.Errorf("record the refusal of %s %s (%s): %w (terminated all the same)", n.Kind, n.ID, key, err))
	}
	reason := fmt.Sprintf("%s answered %s", n.Origin.Platform, a.status)
	if a.body != "" {
		reason += ": " + a.body
	}
	rt.refuse(n, fmt.Sprintf("%s answered %d", n.Origin.Platform, a.code), reason+" (final: not retried)")
	_ = msg.TermWithReason(fmt.Sprintf("%s answered %s", n.Origin.Platform, a.status))
}

// refuse reports n as refused, for reason, to whoever listens on the
// refusals subject (the load driver counts them), and logs it on standard
// error: the first of each class (a few words naming the kind of refusal)
// and then one line in 30 s with the count of those not printed, so that a
// flood of forgeries or of blocked chats costs a line, not a line each.
func (rt *router) refuse(n notification, class, reason string) {
	what := "refused " + n.Kind
	if n.Kind == "" {
		what += "a notification"
	}
	if n.ID != "" {
		what += " " + n.ID
	}
	if n.Origin.Platform != "" {
		what += " to " + n.Origin.Platform + " chat " + n.Origin.ChatID
		if n.Origin.ThreadID != "" {
			what += " thread " + n.Origin.ThreadID
		}
	}
	rt.refusals.printAs(class, errors.New(printable(what+": "+reason)))
	rt.publishRefusal(refusal{Kind: n.Kind, ID: n.ID, Key: n.Key, Reason: reason})
}

// refuseForged reports a notification whose session did not verify. It is
// counted apart from the expected refusals: its kind and id are whatever the
// forger wrote, and so is the chat it names, which the log quotes.
func (rt *router) refuseForged(n notification, reason string) {
	rt.refusals.printAs("forged", errors.New(printable(fmt.Sprintf("refused a forged notification (by its own account kind %q, id %q, platform %q, chat %q): %s",
		n.Kind, n.ID, n.Origin.Platform, n.Origin.ChatID, reason))))
	rt.publishRefusal(refusal{Kind: n.Kind, ID: n.ID, Key: n.Key, Reason: reason, Forged: true})
}

func (rt *router) publishRefusal(r refusal) {
	b, _ := json.Marshal(r)
	if err := rt.nc.Publish(refusedSubject, b); err != nil {
		rt.errs.print(fmt.Errorf("report a refusal: %w", err))
	}
}
