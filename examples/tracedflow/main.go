// Command tracedflow follows chat messages through every boundary sessionwire
// crosses, with the session on every span: an HTTP ingress binds each
// message's session, a NATS JetStream queue carries it to a worker, the worker
// runs a tool as a child process and calls a downstream service over HTTP
// and over gRPC, and a router delivers the reply — and, after the turn has
// ended, a background completion, whose span links back to the turn that
// promised it — to the message's own chat thread.
//
//	go run ./examples/tracedflow                 # spans summarised on stdout
//
// To follow one message in Jaeger (see collector-config/README.md):
//
//	"$(collector-config/jaegertool/build.sh)" --config=file:collector-config/jaeger.yaml &
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 go run ./examples/tracedflow
//	curl -sg 'http://127.0.0.1:16686/api/traces?service=tracedflow-gateway&tags={"session.thread_id":"thread-1"}'
//
// It exits with status 1 if any delivery reached the wrong thread or never
// arrived.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/examples/internal/demotrace"
	"github.com/sessionwire/sessionwire/examples/internal/exampleflag"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/execsession"
)

// toolEnv marks the child process that plays the tool.
const toolEnv = "TRACEDFLOW_ROLE_TOOL"

func main() {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if os.Getenv(toolEnv) != "" {
		os.Exit(runTool(os.Stdout))
	}
	conversations := flag.Int("conversations", 3, "concurrent conversations, one message each")
	exampleflag.Parse("tracedflow", `Follows chat messages through every boundary sessionwire crosses, with the
session on every span: an HTTP ingress, a NATS JetStream queue, a worker that
runs a tool as a child process and calls a downstream service over HTTP and
gRPC, and a router that delivers the reply and a later background completion
to the message's own thread. It prints the deliveries and a count of spans by
service; with OTEL_EXPORTER_OTLP_ENDPOINT set it sends the spans there instead
(see collector-config/README.md to follow one message in Jaeger). Exit status
1 if any delivery reached the wrong thread or never arrived.`,
		"tracedflow",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 tracedflow -conversations 5")
	if *conversations < 1 || *conversations > 1000 {
		exampleflag.Fail("tracedflow", "-conversations must be between 1 and 1000")
	}
	sum := &demotrace.Summary{}
	res, err := run(context.Background(), *conversations, sum)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracedflow:", err)
		os.Exit(1)
	}
	fmt.Print(res)
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		fmt.Printf("\nspans by service / name (set OTEL_EXPORTER_OTLP_ENDPOINT to send them to a collector):\n%s\n", sum)
	}
	if res.misrouted > 0 || res.lost > 0 {
		os.Exit(1)
	}
}

// runTool is the child process: one call restores the session, then it works
// under it and reports the thread it belongs to.
func runTool(out io.Writer) int {
	ctx, err := execsession.FromEnvironment(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "tool:", err)
		return 1
	}
	tp, err := demotrace.NewProvider(ctx, "tracedflow-tool", &demotrace.Summary{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "tool:", err)
		return 1
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	_, span := tp.Tracer("tracedflow/tool").Start(ctx, "tool")
	defer span.End()
	fmt.Fprintln(out, otelsession.Getenv(ctx, "HERMES_SESSION_THREAD_ID", ""))
	return 0
}

type result struct {
	sent, delivered, misrouted, lost int
	toolMismatch, downstreamMismatch int
	grpcMismatch                     int
	elapsed                          time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("messages sent %d; deliveries %d (a reply and a background completion each); misrouted %d; lost %d\n"+
		"tool child processes that saw another session %d; downstream calls that saw another session %d (HTTP), %d (gRPC); %v\n",
		r.sent, r.delivered, r.misrouted, r.lost, r.toolMismatch, r.downstreamMismatch, r.grpcMismatch, r.elapsed.Round(time.Millisecond))
}

func conversation(i int) chatMessage {
	platforms := []string{"telegram", "discord", "slack"}
	return chatMessage{
		Platform: platforms[i%len(platforms)], ChatID: fmt.Sprintf("chat-%d", i), ThreadID: fmt.Sprintf("thread-%d", i),
		ParentChatID: fmt.Sprintf("channel-%d", i), ScopeID: fmt.Sprintf("guild-%d", i), UserID: fmt.Sprintf("user-%d", i),
		UserName: fmt.Sprintf("User Number %d", i), MessageID: fmt.Sprintf("msg-%d", i), Text: fmt.Sprintf("hello %d", i),
	}
}

// run sends one message per conversation, concurrently, and waits for every
// reply and completion.
func run(ctx context.Context, n int, sum *demotrace.Summary) (result, error) {
	start := time.Now()
	dir, err := os.MkdirTemp("", "tracedflow-*")
	if err != nil {
		return result{}, fmt.Errorf("create a store directory: %w", err)
	}
	defer os.RemoveAll(dir)
	f, err := startFlow(ctx, dir, sum)
	if err != nil {
		return result{}, err
	}
	sendErr := make(chan error, n)
	for i := range n {
		go func() {
			body, _ := json.Marshal(conversation(i))
			resp, err := http.Post(f.ingressURL, "application/json", bytes.NewReader(body))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					err = fmt.Errorf("ingress answered %s", resp.Status)
				}
			}
			sendErr <- err
		}()
	}
	var errs []error
	for range n {
		if err := <-sendErr; err != nil {
			errs = append(errs, err)
		}
	}
	want := 2 * n
	// A bound, not a target: a loaded machine (CI runs the gateway's NATS
	// clusters beside this) can take a while; a lost delivery still shows.
	timeout := time.After(120 * time.Second)
wait:
	for got := 0; got < want; got++ {
		select {
		case <-f.arrived:
		case <-timeout:
			break wait
		}
	}
	f.stop(context.Background())

	r := result{sent: n, elapsed: time.Since(start)}
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]int{}
	for _, d := range f.deliveries {
		r.delivered++
		var i int
		if _, err := fmt.Sscanf(d.AnchorID, "msg-%d", &i); err != nil || conversation(i).ThreadID != d.ThreadID || conversation(i).ChatID != d.ChatID {
			r.misrouted++
			continue
		}
		seen[d.Kind+d.AnchorID]++
	}
	r.lost = want - len(seen)
	for i := range n {
		m := conversation(i)
		if f.toolSeen[m.MessageID] != m.ThreadID {
			r.toolMismatch++
		}
		if f.downSeen[m.MessageID] != m.ThreadID {
			r.downstreamMismatch++
		}
		if f.grpcSeen[m.MessageID] != m.ThreadID {
			r.grpcMismatch++
		}
	}
	return r, errors.Join(errs...)
}
