package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

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
	js          jetstream.JetStream
	nc          *nats.Conn
	kv          jetstream.KeyValue
	platformURL string // base URL; the platform's name is appended
	tracer      trace.Tracer
	client      *http.Client
	inFlight    sync.Map // keys being delivered by this process
	errs        onceLog
	platforms   breakers // one per platform
}

func newRouter(store string, verifier *propagation.Verifier, js jetstream.JetStream, nc *nats.Conn, platformURL string, tp *sdktrace.TracerProvider) *router {
	return &router{
		store: store,
		// No publisher is trusted as such: anyone who can publish to the
		// replies subject could otherwise send a reply to any thread.
		cons: natssession.NewConsumer(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier)),
			natssession.WithTracerProvider(tp), natssession.WithPropagator(propagatorFor(store))),
		js: js, nc: nc, platformURL: platformURL, tracer: tp.Tracer("gateway/router"),
		client: &http.Client{Timeout: 10 * time.Second},
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
	cons, err := consumer(ctx, rt.js, "router", repliesStream, "router", ackWait)
	if err != nil {
		return fmt.Errorf("router: %w", err)
	}
	p := newPool(concurrency)
	cc, err := cons.Consume(p.handler(rt.handle), consumeOptions("router", concurrency)...) // see worker.run
	if err != nil {
		return fmt.Errorf("router: consume notifications: %w", err)
	}
	ready()
	<-ctx.Done()
	cc.Stop()
	p.close()
	return nil
}

func (rt *router) handle(msg jetstream.Msg) {
	defer keepAlive(msg, rt.ackWait)()
	var n notification
	if err := json.Unmarshal(msg.Data(), &n); err != nil {
		// Origin validates while it decodes: a corrupt or forged record stops here.
		rt.refuse(n, "undecodable: "+err.Error())
		_ = msg.Term()
		return
	}
	ctx, ok := rt.route(msg, &n)
	if !ok {
		_ = msg.Term() // never delivered, never redelivered
		return
	}
	if !keyedAs(msg, n.Kind+"-", n.Key) {
		// Its delivery could not be recorded, or not under the key it was
		// queued (and signed) for: refused rather than risk showing it twice.
		rt.refuse(n, fmt.Sprintf("message key %q malformed or not the one it was queued under", n.Key))
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
		_ = msg.Ack() // delivered already: a redelivery after a crash, or a retried publish
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
		rt.refuse(n, "no platform or chat to deliver to")
		_ = msg.Ack()
		return
	case scoped[n.Origin.Platform] && n.Origin.ScopeID == "" && !userBound(n.Origin):
		// Fail closed: a scoped reply without its scope is never sent to a default.
		rt.refuse(n, "scoped platform without a scope, and not a direct message to a user")
		_ = msg.Ack()
		return
	case n.Kind == "completion" && n.Origin.Platform == "api_server":
		rt.refuse(n, "a stateless channel cannot receive a completion")
		_ = msg.Ack()
		return
	}
	if err := rt.platforms.of(n.Origin.Platform).call(func() error { return rt.deliver(ctx, n) }); err != nil {
		if errors.Is(err, errNotCalled) {
			err = fmt.Errorf("deliver %s %s to %s: %w", n.Kind, n.ID, n.Origin.Platform, err)
		}
		// A platform that is down fails every delivery to it the same way.
		rt.errs.printAs("deliver: "+n.Origin.Platform, fmt.Errorf("%w (trying it again)", err))
		_ = msg.NakWithDelay(retryAfter(msg))
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
// its body's origin replaced. Without sessions (--propagation off, the env
// store), the body is all there is.
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
		reason := "forged: no signed session"
		if err != nil {
			reason = "forged: " + err.Error()
		}
		rt.refuseForged(*n, reason)
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
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("deliver %s %s to %s: it answered %s", n.Kind, n.ID, n.Origin.Platform, resp.Status)
	}
	return nil
}

func (rt *router) refuse(n notification, reason string) {
	rt.publishRefusal(refusal{Kind: n.Kind, ID: n.ID, Key: n.Key, Reason: reason})
}

// refuseForged reports a notification whose session did not verify. It is
// counted apart from the expected refusals: its kind and id are whatever the
// forger wrote.
func (rt *router) refuseForged(n notification, reason string) {
	rt.publishRefusal(refusal{Kind: n.Kind, ID: n.ID, Key: n.Key, Reason: reason, Forged: true})
}

func (rt *router) publishRefusal(r refusal) {
	b, _ := json.Marshal(r)
	if err := rt.nc.Publish(refusedSubject, b); err != nil {
		fmt.Fprintln(os.Stderr, "router: report a refusal:", errors.Join(err))
	}
}
