package main

// sessionctl trace: the session explorer. Jaeger answers per trace; a
// conversation is many traces (every message, and every background
// completion, linked to the turn that promised it). This reads them from
// Jaeger's query API, groups them by conversation, follows each hop with the
// session it carried, and flags what sessionwire promises never happens.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
)

const traceUsage = `usage: sessionctl trace --jaeger URL [--chat ID | --thread ID | --session KEY] [flags]
       sessionctl trace --file SAVED.json [flags]

Reads a conversation's traces from Jaeger's query API and shows its journey:
every message and background completion in time order, each hop (service,
span, duration, the session it carried) and the route each notification
took. It flags what should never happen:

  session-differs           a span carries another session than its trace's
  completion-misrouted      a completion was delivered to a route other than
                            its turn's
  session-stripped          a hop received no session although its sender had
                            one (the reason, when a span event records it)
  no-session-after-ingress  the trace lost its session after the ingress
  no-session                a trace with no session at all

Examples:
  sessionctl trace --jaeger http://127.0.0.1:16686 --thread thread-1
  sessionctl trace --jaeger http://127.0.0.1:16686 --check        # every conversation of the last hour
  sessionctl trace --jaeger http://127.0.0.1:16686 --chat 42 --html journey.html

Exit status: 0 when the traces were read (and, with --check, nothing was
flagged), 1 when --check found an anomaly, 2 on a usage error or when Jaeger
could not be read.`

// traceConfig is what the flags ask for.
type traceConfig struct {
	jaeger   string
	file     string
	chat     string
	thread   string
	session  string
	services []string
	lookback time.Duration
	limit    int
	check    bool
	html     string
	asJSON   bool
}

func init() {
	register("trace", command{
		summary: "a conversation's journey through Jaeger: its hops, sessions and routes, and what went wrong",
		usage:   traceUsage,
		run: func(e env) int {
			args := e.args
			if e.asJSON { // sessionctl --json trace …
				args = append([]string{"--json"}, args...)
			}
			return runTrace(args, e.stdout, e.stderr)
		},
		flags: func(fs *flag.FlagSet) { var c traceConfig; var service string; traceFlags(fs, &c, &service) },
	})
}

func runTrace(args []string, stdout, stderr io.Writer) int {
	var c traceConfig
	fs := flag.NewFlagSet("sessionctl trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, traceUsage+"\n\nFlags:")
		fs.PrintDefaults()
	}
	var service string
	traceFlags(fs, &c, &service)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if service != "" {
		for _, s := range strings.Split(service, ",") {
			if s = strings.TrimSpace(s); s != "" {
				c.services = append(c.services, s)
			}
		}
	}
	return c.runChecked(fs.Args(), stdout, stderr)
}

// traceFlags declares the trace command's flags into fs.
func traceFlags(fs *flag.FlagSet, c *traceConfig, service *string) {
	fs.StringVar(&c.jaeger, "jaeger", "", "base URL of Jaeger's query service, such as http://127.0.0.1:16686")
	fs.StringVar(&c.file, "file", "", "read a saved answer of Jaeger's /api/traces (JSON) instead of asking Jaeger")
	fs.StringVar(&c.chat, "chat", "", "only the traces of this chat id (session.chat_id)")
	fs.StringVar(&c.thread, "thread", "", "only the traces of this thread id (session.thread_id)")
	fs.StringVar(&c.session, "session", "", "only the traces of this session key (session.key, the conversation id)")
	fs.StringVar(service, "service", "", "comma-separated services to search; default: every service Jaeger knows")
	fs.DurationVar(&c.lookback, "lookback", time.Hour, "how far back to search, such as 15m or 2h")
	fs.IntVar(&c.limit, "limit", 1000, "most traces to read per service")
	fs.BoolVar(&c.check, "check", false, "exit with status 1 if anything is flagged (for CI after a load)")
	fs.StringVar(&c.html, "html", "", "also write a self-contained timeline page to this file")
	fs.BoolVar(&c.asJSON, "json", false, "print JSON instead of text")
}

// runChecked validates the parsed flags and args, then reads the traces and
// reports them.
func (c *traceConfig) runChecked(args []string, stdout, stderr io.Writer) int {
	if err := c.validate(args); err != nil {
		fmt.Fprintln(stderr, "sessionctl trace:", err)
		fmt.Fprintln(stderr, "run 'sessionctl trace --help' for the flags")
		return 2
	}

	var traces []jTrace
	var left []string // Jaeger's own services, not searched
	var err error
	if c.file != "" {
		traces, err = readSaved(c.file)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		traces, left, err = (&jaegerClient{base: strings.TrimRight(c.jaeger, "/"), http: &http.Client{Timeout: 30 * time.Second}}).find(ctx, *c)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sessionctl trace:", err)
		return 2
	}
	ex := explore(traces)
	if c.file != "" {
		ex = ex.only(c.filter())
	}
	ex.Query = c.describe()
	if len(left) > 0 {
		ex.Query += fmt.Sprintf(" (not Jaeger's own traces, of service %s: --service names the services to search)", strings.Join(left, ", "))
	}
	if c.html != "" {
		if err := writeHTMLFile(c.html, ex); err != nil {
			fmt.Fprintln(stderr, "sessionctl trace:", err)
			return 2
		}
	}
	if c.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(ex); err != nil {
			fmt.Fprintln(stderr, "sessionctl trace: write JSON:", err)
			return 2
		}
	} else {
		printExploration(stdout, ex)
	}
	if c.html != "" && !c.asJSON {
		fmt.Fprintf(stdout, "timeline written to %s\n", c.html)
	}
	if c.check && len(ex.Anomalies) > 0 {
		return 1
	}
	return 0
}

func (c *traceConfig) validate(rest []string) error {
	switch {
	case len(rest) > 0:
		return fmt.Errorf("unexpected argument %q (the filters are flags: --chat, --thread, --session)", rest[0])
	case c.jaeger == "" && c.file == "":
		return errors.New("say where the traces are: --jaeger http://127.0.0.1:16686 (Jaeger's query service) or --file SAVED.json")
	case c.jaeger != "" && c.file != "":
		return errors.New("--jaeger and --file are alternatives: give one")
	case c.lookback <= 0:
		return fmt.Errorf("--lookback must be positive, not %v", c.lookback)
	case c.limit < 1:
		return fmt.Errorf("--limit must be at least 1, not %d", c.limit)
	}
	n := 0
	for _, f := range []string{c.chat, c.thread, c.session} {
		if f != "" {
			n++
		}
	}
	if n > 1 {
		return errors.New("give at most one of --chat, --thread and --session")
	}
	if c.jaeger != "" {
		u, err := url.Parse(c.jaeger)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--jaeger %q is not an http(s) URL such as http://127.0.0.1:16686", c.jaeger)
		}
	}
	return nil
}

// filter is the one span tag the flags select on, if any.
func (c *traceConfig) filter() (key, value string) {
	switch {
	case c.chat != "":
		return tagChat, c.chat
	case c.thread != "":
		return tagThread, c.thread
	case c.session != "":
		return tagKey, c.session
	}
	return "", ""
}

func (c *traceConfig) describe() string {
	k, v := c.filter()
	src := c.jaeger
	if c.file != "" {
		src = c.file
	}
	if k == "" {
		return fmt.Sprintf("every trace in %s", src)
	}
	return fmt.Sprintf("%s=%s in %s", k, v, src)
}

// The span attributes sessionwire's span processor writes (package
// sessiontrace), and the ones the explorer reads beside them.
const (
	tagPrefix       = "session."
	tagPlatform     = "session.platform"
	tagScope        = "session.scope_id"
	tagChat         = "session.chat_id"
	tagThread       = "session.thread_id"
	tagMessage      = "session.message_id"
	tagKey          = "session.key"
	tagConversation = "gen_ai.conversation.id"
	tagSpanKind     = "span.kind"
	tagError        = "error"
	// The span event an inbound boundary adds when it refuses or strips a
	// session (propagation/internal/refusal), and its reason attribute.
	eventRefused    = "session.refused"
	attrReason      = "session.refusal.reason"
	eventException  = "exception"
	attrExceptionMs = "exception.message"
)

// routeTags are the fields that say where a notification goes: a span whose
// value for one of them differs from its trace's belongs to another
// conversation, or to another message of it.
var routeTags = []string{tagPlatform, tagScope, tagChat, tagThread, tagMessage, tagKey}

// --- Jaeger's query API (the JSON of /api/traces, as Jaeger v1.75 serves it) ---

type jTrace struct {
	TraceID   string              `json:"traceID"`
	Spans     []jSpan             `json:"spans"`
	Processes map[string]jProcess `json:"processes"`
}

type jProcess struct {
	ServiceName string `json:"serviceName"`
}

type jSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []jRef `json:"references"`
	StartTime     int64  `json:"startTime"` // microseconds since the epoch
	Duration      int64  `json:"duration"`  // microseconds
	Tags          []jKV  `json:"tags"`
	Logs          []jLog `json:"logs"`
	ProcessID     string `json:"processID"`
}

type jRef struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

type jKV struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

type jLog struct {
	Timestamp int64 `json:"timestamp"`
	Fields    []jKV `json:"fields"`
}

type jResponse struct {
	Data   []jTrace `json:"data"`
	Errors []struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"errors"`
}

func decodeResponse(r io.Reader, what string) ([]jTrace, error) {
	var resp jResponse
	if err := json.NewDecoder(r).Decode(&resp); err != nil {
		return nil, fmt.Errorf("%s is not a Jaeger /api/traces answer: %w", what, err)
	}
	if len(resp.Errors) > 0 {
		msgs := make([]string, len(resp.Errors))
		for i, e := range resp.Errors {
			msgs[i] = e.Msg
		}
		return nil, fmt.Errorf("%s: Jaeger reported: %s", what, strings.Join(msgs, "; "))
	}
	for i, t := range resp.Data {
		if t.TraceID == "" {
			return nil, fmt.Errorf("%s: trace %d has no traceID", what, i)
		}
	}
	return resp.Data, nil
}

func readSaved(path string) ([]jTrace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read saved traces: %w", err)
	}
	defer f.Close()
	return decodeResponse(f, path)
}

type jaegerClient struct {
	base string
	http *http.Client
}

func (j *jaegerClient) get(ctx context.Context, path string, q url.Values, out any) error {
	u := j.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("build the request for %s: %w", u, err)
	}
	resp, err := j.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach Jaeger's query API at %s (is Jaeger running, and is that its query port, 16686 by default?): %w", j.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/api/traces/") {
		return errNotFound
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("the query API answered %s for %s: %s", resp.Status, u, strings.TrimSpace(string(b)))
	}
	switch o := out.(type) {
	case *[]jTrace:
		t, err := decodeResponse(resp.Body, u)
		*o = t
		return err
	default:
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("decode Jaeger's answer for %s: %w", u, err)
		}
	}
	return nil
}

var errNotFound = errors.New("not found")

// jaegerOwn are the service names Jaeger traces its own work under (v2, and
// v1's query service and all-in-one). Jaeger traces every query it answers,
// so after one search its own traces, which carry no session, would be
// flagged by the next.
var jaegerOwn = map[string]bool{"jaeger": true, "jaeger-query": true, "jaeger-all-in-one": true, "jaeger-collector": true}

// find reads the traces the flags select from every service (a trace found
// through two services is read once), then the turns that the completions
// among them link to, when the search did not return them. With no
// --service it searches every service Jaeger knows but Jaeger's own, and
// returns those it left out.
func (j *jaegerClient) find(ctx context.Context, c traceConfig) (_ []jTrace, left []string, _ error) {
	services := c.services
	if len(services) == 0 {
		var body struct {
			Data []string `json:"data"`
		}
		if err := j.get(ctx, "/api/services", nil, &body); err != nil {
			return nil, nil, err
		}
		for _, s := range body.Data {
			if jaegerOwn[s] {
				left = append(left, s)
			} else {
				services = append(services, s)
			}
		}
		if len(services) == 0 {
			return nil, nil, fmt.Errorf("no service is known to Jaeger at %s yet but its own: no application's spans have reached it", j.base)
		}
	}
	end := time.Now()
	q := url.Values{}
	q.Set("start", fmt.Sprint(end.Add(-c.lookback).UnixMicro()))
	q.Set("end", fmt.Sprint(end.UnixMicro()))
	q.Set("limit", fmt.Sprint(c.limit))
	if k, v := c.filter(); k != "" {
		tags, _ := json.Marshal(map[string]string{k: v})
		q.Set("tags", string(tags))
	}
	byID := map[string]jTrace{}
	var order []string
	add := func(ts []jTrace) {
		for _, t := range ts {
			if _, ok := byID[t.TraceID]; !ok {
				order = append(order, t.TraceID)
			}
			byID[t.TraceID] = t
		}
	}
	sort.Strings(services)
	for _, s := range services {
		q.Set("service", s)
		var ts []jTrace
		if err := j.get(ctx, "/api/traces", q, &ts); err != nil {
			return nil, nil, fmt.Errorf("search the traces of service %s: %w", s, err)
		}
		add(ts)
	}
	// A completion's turn: needed to tell where the completion should have
	// gone. At most --limit of them are read one by one.
	fetched := 0
	for i := 0; i < len(order) && fetched < c.limit; i++ {
		for _, s := range byID[order[i]].Spans {
			for _, r := range s.References {
				if r.TraceID == "" || r.TraceID == s.TraceID {
					continue
				}
				if _, ok := byID[r.TraceID]; ok {
					continue
				}
				var ts []jTrace
				fetched++
				err := j.get(ctx, "/api/traces/"+url.PathEscape(r.TraceID), nil, &ts)
				if errors.Is(err, errNotFound) {
					byID[r.TraceID] = jTrace{} // gone (expired from storage): remember not to ask again
					continue
				}
				if err != nil {
					return nil, nil, fmt.Errorf("read linked trace %s: %w", r.TraceID, err)
				}
				add(ts)
			}
		}
	}
	out := make([]jTrace, 0, len(order))
	for _, id := range order {
		if t := byID[id]; t.TraceID != "" {
			out = append(out, t)
		}
	}
	return out, left, nil
}

// --- The exploration ---

// Exploration is everything the explorer found, as printed, written as HTML
// and encoded with --json.
type Exploration struct {
	Query         string          `json:"query"`
	Conversations []*Conversation `json:"conversations"`
	Anomalies     []Anomaly       `json:"anomalies"`
	Messages      int             `json:"messages"`
	Completions   int             `json:"completions"`
	Spans         int             `json:"spans"`
}

// Conversation is the traces of one session key, in time order.
type Conversation struct {
	ID        string   `json:"id"`
	Traces    []*Trace `json:"traces"`
	Services  []string `json:"services"`
	Start     int64    `json:"start_us"`
	End       int64    `json:"end_us"`
	Anomalies int      `json:"anomalies"`
}

// Trace is one message (a turn) or one background completion.
type Trace struct {
	ID   string `json:"trace_id"`
	Kind string `json:"kind"` // "message" or "completion"
	// Origin is, for a completion, the turn it belongs to: the span its
	// root links to.
	Origin       *SpanRef          `json:"origin,omitempty"`
	Session      map[string]string `json:"session"` // what every span should carry
	Conversation string            `json:"conversation"`
	Start        int64             `json:"start_us"`
	End          int64             `json:"end_us"`
	Spans        []*Span           `json:"spans"`
	Routes       []Route           `json:"routes"` // where its notifications were delivered
	Anomalies    []Anomaly         `json:"anomalies,omitempty"`
}

// SpanRef names a span of another trace.
type SpanRef struct {
	TraceID string `json:"trace_id"`
	SpanID  string `json:"span_id"`
}

// Span is one hop, or a step within one.
type Span struct {
	ID       string            `json:"span_id"`
	Parent   string            `json:"parent_id,omitempty"`
	Service  string            `json:"service"`
	Name     string            `json:"name"`
	Kind     string            `json:"kind,omitempty"`
	Start    int64             `json:"start_us"`
	Duration int64             `json:"duration_us"`
	Depth    int               `json:"depth"`
	Session  map[string]string `json:"session,omitempty"`
	// Carried is how its session compares with the trace's: "same",
	// "none", or "differs".
	Carried string   `json:"carried"`
	Events  []string `json:"events,omitempty"` // session refusals and errors it recorded
	Anomaly bool     `json:"anomaly,omitempty"`
}

// Route is where a delivery span sent its notification.
type Route struct {
	Span  string `json:"span"`
	Where string `json:"where"`
}

// Anomaly is one thing that should never happen.
type Anomaly struct {
	Kind         string `json:"kind"`
	Conversation string `json:"conversation"`
	TraceID      string `json:"trace_id"`
	SpanID       string `json:"span_id,omitempty"`
	Span         string `json:"span,omitempty"` // service: name
	Detail       string `json:"detail"`
}

const (
	anomalyDiffers    = "session-differs"
	anomalyMisrouted  = "completion-misrouted"
	anomalyStripped   = "session-stripped"
	anomalyAfter      = "no-session-after-ingress"
	anomalyNoSession  = "no-session"
	carriedSame       = "same"
	carriedNone       = "none"
	carriedDiffers    = "differs"
	noConversation    = "(no session)"
	deliverSpanPrefix = "deliver"
)

// explore builds the view of traces: every trace's spans in time order with
// the session each carried, the traces grouped by conversation, and the
// anomalies.
func explore(raw []jTrace) *Exploration {
	byID := map[string]*Trace{}
	var all []*Trace
	for _, jt := range raw {
		if _, dup := byID[jt.TraceID]; dup || len(jt.Spans) == 0 {
			continue
		}
		t := buildTrace(jt)
		byID[t.ID] = t
		all = append(all, t)
	}
	// The session a trace should carry: its own root's, or, for a
	// completion, its turn's (a completion is routed by what its turn
	// stored).
	for _, t := range all {
		t.Session = ownSession(t)
		if t.Origin != nil {
			if o := byID[t.Origin.TraceID]; o != nil {
				if s := ownSession(o); len(s) > 0 {
					t.Session = s
				}
			}
		}
		t.Conversation = conversationOf(t.Session)
	}
	ex := &Exploration{}
	convs := map[string]*Conversation{}
	for _, t := range all {
		check(t)
		c := convs[t.Conversation]
		if c == nil {
			c = &Conversation{ID: t.Conversation}
			convs[t.Conversation] = c
		}
		c.Traces = append(c.Traces, t)
		if t.Kind == "completion" {
			ex.Completions++
		} else {
			ex.Messages++
		}
		ex.Spans += len(t.Spans)
	}
	for _, c := range convs {
		sort.Slice(c.Traces, func(i, j int) bool { return c.Traces[i].Start < c.Traces[j].Start })
		services := map[string]bool{}
		c.Start, c.End = c.Traces[0].Start, c.Traces[0].End
		for _, t := range c.Traces {
			c.Start, c.End = min(c.Start, t.Start), max(c.End, t.End)
			for _, s := range t.Spans {
				services[s.Service] = true
			}
			c.Anomalies += len(t.Anomalies)
		}
		c.Services = orderServices(c.Traces, services)
		ex.Conversations = append(ex.Conversations, c)
	}
	sort.Slice(ex.Conversations, func(i, j int) bool {
		a, b := ex.Conversations[i], ex.Conversations[j]
		if a.Start != b.Start {
			return a.Start < b.Start
		}
		return a.ID < b.ID
	})
	for _, c := range ex.Conversations {
		for _, t := range c.Traces {
			ex.Anomalies = append(ex.Anomalies, t.Anomalies...)
		}
	}
	return ex
}

// only keeps the conversations with a span tagged key=value (what Jaeger's
// tag search would have returned), for saved traces.
func (ex *Exploration) only(key, value string) *Exploration {
	if key == "" {
		return ex
	}
	out := &Exploration{}
	for _, c := range ex.Conversations {
		keep := false
		for _, t := range c.Traces {
			for _, s := range t.Spans {
				if v, ok := s.Session[key]; ok && v == value {
					keep = true
				}
			}
		}
		if !keep {
			continue
		}
		out.Conversations = append(out.Conversations, c)
		for _, t := range c.Traces {
			out.Anomalies = append(out.Anomalies, t.Anomalies...)
			if t.Kind == "completion" {
				out.Completions++
			} else {
				out.Messages++
			}
			out.Spans += len(t.Spans)
		}
	}
	return out
}

// orderServices lists services in the order the conversation first reaches
// them, so lanes read from ingress to delivery.
func orderServices(traces []*Trace, set map[string]bool) []string {
	first := map[string]int64{}
	for _, t := range traces {
		for _, s := range t.Spans {
			if v, ok := first[s.Service]; !ok || s.Start-t.Start < v {
				first[s.Service] = s.Start - t.Start
			}
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if first[out[i]] != first[out[j]] {
			return first[out[i]] < first[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}

func buildTrace(jt jTrace) *Trace {
	t := &Trace{ID: jt.TraceID, Kind: "message"}
	inTrace := map[string]bool{}
	for _, s := range jt.Spans {
		inTrace[s.SpanID] = true
	}
	for _, js := range jt.Spans {
		s := &Span{ID: js.SpanID, Service: jt.Processes[js.ProcessID].ServiceName, Name: js.OperationName,
			Start: js.StartTime, Duration: js.Duration}
		if s.Service == "" {
			s.Service = "(unknown service)"
		}
		// Jaeger lists the parent first; links to other traces follow.
		var link *SpanRef
		for _, r := range js.References {
			if r.TraceID == jt.TraceID && inTrace[r.SpanID] && s.Parent == "" {
				s.Parent = r.SpanID
			} else if r.TraceID != jt.TraceID && link == nil {
				link = &SpanRef{TraceID: r.TraceID, SpanID: r.SpanID}
			}
		}
		if s.Parent == "" && link != nil && t.Origin == nil {
			// A root linked to another trace: work that outlived its turn.
			t.Kind, t.Origin = "completion", link
		}
		for _, kv := range js.Tags {
			switch {
			case strings.HasPrefix(kv.Key, tagPrefix) || kv.Key == tagConversation:
				if s.Session == nil {
					s.Session = map[string]string{}
				}
				s.Session[kv.Key] = fmt.Sprint(kv.Value)
			case kv.Key == tagSpanKind:
				s.Kind = fmt.Sprint(kv.Value)
			}
		}
		for _, l := range js.Logs {
			if e := describeEvent(l); e != "" {
				s.Events = append(s.Events, e)
			}
		}
		t.Spans = append(t.Spans, s)
	}
	sort.SliceStable(t.Spans, func(i, j int) bool { return t.Spans[i].Start < t.Spans[j].Start })
	t.Start, t.End = t.Spans[0].Start, t.Spans[0].Start+t.Spans[0].Duration
	byID := map[string]*Span{}
	for _, s := range t.Spans {
		byID[s.ID] = s
		t.End = max(t.End, s.Start+s.Duration)
	}
	for _, s := range t.Spans {
		d := 0
		for p := byID[s.Parent]; p != nil && d < len(t.Spans); p = byID[p.Parent] {
			d++
		}
		s.Depth = d
	}
	return t
}

// describeEvent returns what a span event says about the session (a
// refusal, with its reason) or an error, or "" for other events.
func describeEvent(l jLog) string {
	f := map[string]string{}
	for _, kv := range l.Fields {
		f[kv.Key] = fmt.Sprint(kv.Value)
	}
	switch f["event"] {
	case eventRefused:
		return "session refused: " + f[attrReason]
	case eventException:
		return "error: " + f[attrExceptionMs]
	}
	return ""
}

// ownSession is the session of the first span of t that carries one, its
// root's when the root does.
func ownSession(t *Trace) map[string]string {
	for _, s := range t.Spans {
		if s.Parent == "" && len(route(s.Session)) > 0 {
			return route(s.Session)
		}
	}
	for _, s := range t.Spans {
		if r := route(s.Session); len(r) > 0 {
			return r
		}
	}
	return nil
}

// route keeps the routing fields of a span's session.
func route(s map[string]string) map[string]string {
	var out map[string]string
	for _, k := range append(routeTags, tagConversation) {
		if v, ok := s[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

func conversationOf(s map[string]string) string {
	for _, k := range []string{tagConversation, tagKey} {
		if v := s[k]; v != "" {
			return v
		}
	}
	if s[tagPlatform] != "" || s[tagChat] != "" {
		return strings.Join([]string{s[tagPlatform], s[tagChat], s[tagThread]}, ":")
	}
	return noConversation
}

// differences lists the routing fields on which got disagrees with want,
// among those both hold.
func differences(want, got map[string]string) []string {
	var out []string
	for _, k := range routeTags {
		w, ok1 := want[k]
		g, ok2 := got[k]
		if ok1 && ok2 && w != g {
			out = append(out, fmt.Sprintf("%s=%q (expected %q)", strings.TrimPrefix(k, tagPrefix), g, w))
		}
	}
	return out
}

// whereTo renders a session's route: platform, scope, chat, thread, anchor.
func whereTo(s map[string]string) string {
	var parts []string
	for _, f := range []struct{ key, label string }{{tagPlatform, ""}, {tagScope, "scope "}, {tagChat, "chat "},
		{tagThread, "thread "}, {tagMessage, "anchor "}} {
		if v, ok := s[f.key]; ok && v != "" {
			parts = append(parts, f.label+v)
		}
	}
	if len(parts) == 0 {
		return "(no route)"
	}
	return strings.Join(parts, " ")
}

// check marks how each span's session compares with its trace's, records
// the routes taken and finds the anomalies.
func check(t *Trace) {
	byID := map[string]*Span{}
	for _, s := range t.Spans {
		byID[s.ID] = s
	}
	add := func(kind string, s *Span, detail string) {
		a := Anomaly{Kind: kind, Conversation: t.Conversation, TraceID: t.ID, Detail: detail}
		if s != nil {
			a.SpanID, a.Span = s.ID, s.Service+": "+s.Name
			s.Anomaly = true
		}
		t.Anomalies = append(t.Anomalies, a)
	}
	if len(t.Session) == 0 {
		for _, s := range t.Spans {
			s.Carried = carriedNone
		}
		add(anomalyNoSession, t.Spans[0], "no span of this trace carries a session: whatever it delivered was routed without one")
		return
	}
	var stripped []*Span
	sessionAfterIngress, crossed := false, false
	differing, firstDiff := 0, -1
	for _, s := range t.Spans {
		r := route(s.Session)
		// A hop is a span that received work from another process: a
		// consumer or a server span. The ingress is the root's side of the
		// first one.
		afterIngress := s.Kind == "consumer" || s.Kind == "server" || (s.Parent != "" && beyondHop(byID, s))
		if afterIngress {
			crossed = true
		}
		switch diff := differences(t.Session, r); {
		case len(r) == 0:
			s.Carried = carriedNone
			if p := byID[s.Parent]; p != nil && len(route(p.Session)) > 0 {
				stripped = append(stripped, s)
			}
		case len(diff) > 0:
			s.Carried = carriedDiffers
			if afterIngress {
				sessionAfterIngress = true
			}
			if t.Kind == "completion" && strings.HasPrefix(s.Name, deliverSpanPrefix) {
				add(anomalyMisrouted, s, fmt.Sprintf("completion delivered to %s; its turn (trace %s) came from %s",
					whereTo(r), t.Origin.TraceID, whereTo(t.Session)))
			} else if differing++; differing == 1 {
				// The first span that went astray says where; the ones after
				// it follow from it, and are counted below.
				firstDiff = len(t.Anomalies)
				add(anomalyDiffers, s, fmt.Sprintf("carries another session than its trace's: %s", strings.Join(diff, ", ")))
			} else {
				s.Anomaly = true
			}
		default:
			s.Carried = carriedSame
			if afterIngress {
				sessionAfterIngress = true
			}
		}
		if strings.HasPrefix(s.Name, deliverSpanPrefix) {
			t.Routes = append(t.Routes, Route{Span: s.Name, Where: whereTo(r)})
		}
	}
	if differing > 1 {
		t.Anomalies[firstDiff].Detail += fmt.Sprintf(" (and %d later spans of this trace)", differing-1)
	}
	if t.Kind == "message" && crossed && !sessionAfterIngress {
		detail := "the ingress bound a session, but no span after it carries one"
		if len(stripped) > 0 {
			detail += fmt.Sprintf("; it was first lost at %s: %s (%s)", stripped[0].Service, stripped[0].Name, strippedReason(stripped[0]))
		}
		var at *Span
		if len(stripped) > 0 {
			at = stripped[0]
		}
		add(anomalyAfter, at, detail)
		return
	}
	for _, s := range stripped {
		add(anomalyStripped, s, fmt.Sprintf("received no session although %s had one: %s", byID[s.Parent].Name, strippedReason(s)))
	}
}

// beyondHop reports whether s descends from a consumer or server span.
func beyondHop(byID map[string]*Span, s *Span) bool {
	for p, n := byID[s.Parent], 0; p != nil && n < len(byID); p, n = byID[p.Parent], n+1 {
		if p.Kind == "consumer" || p.Kind == "server" {
			return true
		}
	}
	return false
}

// strippedReason is why a span has no session, from the events the
// boundary recorded on it.
func strippedReason(s *Span) string {
	for _, e := range s.Events {
		if strings.HasPrefix(e, "session refused") {
			return e
		}
	}
	for _, e := range s.Events {
		if strings.HasPrefix(e, "error") {
			return e
		}
	}
	return "no refusal recorded: the sender's propagator sent no baggage, or the session was kept outside the context"
}

// --- Text output ---

func printExploration(w io.Writer, ex *Exploration) {
	fmt.Fprintf(w, "sessionctl trace: %s\n", ex.Query)
	if len(ex.Conversations) == 0 {
		fmt.Fprintln(w, "no traces found (widen --lookback, or check the filter and that the services export to this Jaeger)")
		return
	}
	svcW := 8
	for _, c := range ex.Conversations {
		for _, s := range c.Services {
			svcW = max(svcW, len(s))
		}
	}
	for _, c := range ex.Conversations {
		msgs, comps := 0, 0
		for _, t := range c.Traces {
			if t.Kind == "completion" {
				comps++
			} else {
				msgs++
			}
		}
		fmt.Fprintf(w, "\nconversation %s: %s, %s, %s\n", c.ID, counted(msgs, "message", "messages"),
			counted(comps, "completion", "completions"), counted(c.Anomalies, "anomaly", "anomalies"))
		for _, t := range c.Traces {
			at := time.UnixMicro(t.Start).UTC().Format("15:04:05.000")
			if t.Kind == "completion" {
				fmt.Fprintf(w, "  %s  completion  trace %s  (late, for the turn in trace %s)\n", at, t.ID, t.Origin.TraceID)
			} else {
				fmt.Fprintf(w, "  %s  message     trace %s  from %s\n", at, t.ID, whereTo(t.Session))
			}
			for _, s := range t.Spans {
				mark := ""
				if s.Anomaly {
					mark = "  <-- anomaly"
				}
				name := strings.Repeat("  ", min(s.Depth, 8)) + s.Name
				fmt.Fprintf(w, "      %9s %9s  %-*s  %-44s session %s%s\n", "+"+fmtDur(s.Start-t.Start), fmtDur(s.Duration),
					svcW, s.Service, name, carriedText(s), mark)
			}
			for _, r := range t.Routes {
				fmt.Fprintf(w, "      route (%s): %s\n", r.Span, r.Where)
			}
			if len(t.Routes) == 0 {
				fmt.Fprintln(w, "      route: no delivery span in this trace")
			}
		}
	}
	fmt.Fprintf(w, "\n%s, %s, %s, %s, %s\n", counted(len(ex.Conversations), "conversation", "conversations"),
		counted(ex.Messages, "message", "messages"), counted(ex.Completions, "completion", "completions"),
		counted(ex.Spans, "span", "spans"), counted(len(ex.Anomalies), "anomaly", "anomalies"))
	for _, a := range ex.Anomalies {
		where := "trace " + a.TraceID
		if a.Span != "" {
			where += ", span " + a.Span
		}
		fmt.Fprintf(w, "  %s  %s  (%s; conversation %s)\n", a.Kind, a.Detail, where, a.Conversation)
	}
}

func carriedText(s *Span) string {
	if s.Carried == carriedDiffers {
		return "DIFFERS: " + whereTo(route(s.Session))
	}
	return s.Carried
}

func fmtDur(us int64) string {
	d := time.Duration(us) * time.Microsecond
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", us)
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fms", float64(us)/1000)
	}
	return d.Round(10 * time.Millisecond).String()
}

// counted is n with its noun, singular for one: "1 conversation", "0 anomalies".
func counted(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
