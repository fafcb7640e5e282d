package main

// sessionctl trace --html: one self-contained page (inline CSS, SVG and a
// little JavaScript; nothing fetched from the network) with a timeline per
// conversation: one lane per service, every span a bar, a line from each
// turn to its late completion, anomalies in red.

import (
	"bytes"
	"fmt"
	"html/template"
	"os"
	"strings"
	"time"
)

// Geometry of the timeline, in SVG user units.
const (
	svgWidth   = 1180.0
	laneLabelW = 190.0
	rightPad   = 16.0
	barH       = 10.0
	rowGap     = 3.0
	lanePad    = 8.0
	axisH      = 22.0
	maxRows    = 16 // bars that overlap beyond this share the last row
)

type htmlPage struct {
	Query         string
	Generated     string
	Conversations []htmlConversation
	Anomalies     []Anomaly
	Messages      int
	Completions   int
	Spans         int
	Bars          int
	Lanes         int
}

type htmlConversation struct {
	ID        string
	Anchor    string
	Messages  int
	Comps     int
	Anomalies []Anomaly
	Height    float64
	Width     float64
	Lanes     []htmlLane
	Bars      []htmlBar
	Links     []htmlLink
	Ticks     []htmlTick
}

type htmlLane struct {
	Service string
	Y, H    float64
	Odd     bool
}

type htmlBar struct {
	X, Y, W  float64
	Class    string
	Trace    string
	Title    string
	Anomaly  bool
	MarkX    float64
	MarkY    float64
	SpanID   string
	Duration string
}

type htmlLink struct {
	Path  string
	Trace string
}

type htmlTick struct {
	X      float64
	Label  string
	Anchor string
}

func writeHTMLFile(path string, ex *Exploration) error {
	var buf bytes.Buffer
	if err := renderHTML(&buf, ex); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the timeline page: %w", err)
	}
	return nil
}

func renderHTML(buf *bytes.Buffer, ex *Exploration) error {
	p := htmlPage{Query: ex.Query, Generated: time.Now().UTC().Format(time.RFC3339), Anomalies: ex.Anomalies,
		Messages: ex.Messages, Completions: ex.Completions, Spans: ex.Spans}
	for i, c := range ex.Conversations {
		hc := layoutConversation(c, i)
		p.Bars += len(hc.Bars)
		p.Lanes += len(hc.Lanes)
		p.Conversations = append(p.Conversations, hc)
	}
	if err := pageTemplate.Execute(buf, p); err != nil {
		return fmt.Errorf("render the timeline page: %w", err)
	}
	return nil
}

// layoutConversation places every span of c: x from its start and
// duration, y in its service's lane, on the first row of the lane where it
// overlaps nothing.
func layoutConversation(c *Conversation, index int) htmlConversation {
	hc := htmlConversation{ID: c.ID, Anchor: fmt.Sprintf("conv-%d", index), Width: svgWidth}
	span := float64(max(c.End-c.Start, 1))
	plotW := svgWidth - laneLabelW - rightPad
	x := func(us int64) float64 { return laneLabelW + float64(us-c.Start)/span*plotW }

	// Rows per lane, packed greedily in start order.
	type placed struct {
		s *Span
		t *Trace
	}
	rowsEnd := map[string][]int64{} // service -> end time of each row's last bar
	rowOf := map[*Span]int{}
	var order []placed
	for _, t := range c.Traces {
		if t.Kind == "completion" {
			hc.Comps++
		} else {
			hc.Messages++
		}
		hc.Anomalies = append(hc.Anomalies, t.Anomalies...)
		for _, s := range t.Spans {
			order = append(order, placed{s, t})
		}
	}
	// Bars are at least minBarUs wide on screen: pack with that width too.
	minBarUs := int64(3 * span / plotW)
	for _, p := range order {
		rows := rowsEnd[p.s.Service]
		end := p.s.Start + max(p.s.Duration, minBarUs)
		r := 0
		for r < len(rows) && rows[r] > p.s.Start {
			r++
		}
		if r >= maxRows {
			r = maxRows - 1
		}
		if r == len(rows) {
			rows = append(rows, end)
		} else {
			rows[r] = max(rows[r], end)
		}
		rowsEnd[p.s.Service] = rows
		rowOf[p.s] = r
	}
	laneY := map[string]float64{}
	y := axisH
	for i, svc := range c.Services {
		h := lanePad*2 + float64(len(rowsEnd[svc]))*(barH+rowGap) - rowGap
		hc.Lanes = append(hc.Lanes, htmlLane{Service: svc, Y: y, H: h, Odd: i%2 == 1})
		laneY[svc] = y + lanePad
		y += h
	}
	hc.Height = y + 4

	barAt := map[string]htmlBar{} // span id -> its bar, for the links
	for _, p := range order {
		s, t := p.s, p.t
		b := htmlBar{X: x(s.Start), Y: laneY[s.Service] + float64(rowOf[s])*(barH+rowGap), Trace: t.ID, SpanID: s.ID,
			W: max(float64(s.Duration)/span*plotW, 2), Anomaly: s.Anomaly, Duration: fmtDur(s.Duration)}
		b.Class = "bar " + t.Kind
		if s.Carried == carriedNone {
			b.Class += " nosession"
		}
		if s.Anomaly {
			b.Class += " anomaly"
			b.MarkX, b.MarkY = b.X+b.W/2, b.Y-1
		}
		b.Title = fmt.Sprintf("%s: %s\n%s, %s after the conversation's start\nsession: %s\ntrace %s (%s)",
			s.Service, s.Name, fmtDur(s.Duration), fmtDur(s.Start-c.Start), carriedText(s), t.ID, t.Kind)
		if len(s.Events) > 0 {
			b.Title += "\n" + strings.Join(s.Events, "\n")
		}
		hc.Bars = append(hc.Bars, b)
		barAt[s.ID] = b
	}
	// A late completion: from the turn's span that promised it to the
	// completion's first span.
	for _, t := range c.Traces {
		if t.Origin == nil {
			continue
		}
		from, ok1 := barAt[t.Origin.SpanID]
		to, ok2 := barAt[t.Spans[0].ID]
		if !ok1 || !ok2 {
			continue
		}
		x1, y1 := from.X+from.W, from.Y+barH/2
		x2, y2 := to.X, to.Y+barH/2
		mid := (x1 + x2) / 2
		hc.Links = append(hc.Links, htmlLink{Trace: t.ID,
			Path: fmt.Sprintf("M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f", x1, y1, mid, y1, mid, y2, x2, y2)})
	}
	for i := 0; i <= 5; i++ {
		us := c.Start + int64(float64(i)/5*span)
		anchor := "middle"
		if i == 5 {
			anchor = "end" // inside the picture
		}
		hc.Ticks = append(hc.Ticks, htmlTick{X: x(us), Label: "+" + fmtDur(us-c.Start), Anchor: anchor})
	}
	return hc
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{"counted": counted}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>sessionwire: conversations in traces</title>
<style>
body { font: 13px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #1d2430; background: #fff; }
h1 { font-size: 19px; margin: 0 0 4px; }
h2 { font-size: 15px; margin: 26px 0 4px; font-family: ui-monospace, monospace; }
.meta { color: #5b6472; }
.ok { color: #17723a; font-weight: 600; }
.bad { color: #b3261e; font-weight: 600; }
svg { display: block; border: 1px solid #d7dbe2; background: #fff; }
.lane { fill: #f7f8fa; } .lane.odd { fill: #eef1f5; }
.lanelabel { font: 12px ui-monospace, monospace; fill: #333; }
.tick { stroke: #d0d4db; } .ticklabel { font: 10px system-ui; fill: #6b7380; }
.bar { stroke-width: 0.5; stroke: #23457a; fill: #4f7fd1; }
.bar.completion { fill: #3aa26b; stroke: #1f6b43; }
.bar.nosession { fill: #b9bfc9; stroke: #8a919c; }
.bar.anomaly { fill: #e0453a; stroke: #7d0f08; stroke-width: 1.2; }
.bar.hi { stroke: #000; stroke-width: 2; }
.link { fill: none; stroke: #3aa26b; stroke-width: 1.3; stroke-dasharray: 4 3; }
.link.hi { stroke: #000; }
.mark { fill: #b3261e; font: bold 12px system-ui; text-anchor: middle; }
.legend span { display: inline-block; margin-right: 14px; }
.sw { display: inline-block; width: 12px; height: 10px; vertical-align: middle; margin-right: 4px; border: 1px solid #555; }
table { border-collapse: collapse; margin-top: 6px; }
td, th { border: 1px solid #d7dbe2; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f0f2f5; }
td.kind { color: #b3261e; font-family: ui-monospace, monospace; white-space: nowrap; }
code { font-family: ui-monospace, monospace; }
</style>
</head>
<body>
<h1>Conversations in traces</h1>
<div class="meta">{{.Query}} &middot; generated {{.Generated}} by <code>sessionctl trace</code></div>
<p>{{counted (len .Conversations) "conversation" "conversations"}}, {{counted .Messages "message" "messages"}}, {{counted .Completions "completion" "completions"}}, {{counted .Spans "span" "spans"}} &middot;
{{if .Anomalies}}<span class="bad">{{counted (len .Anomalies) "anomaly" "anomalies"}}</span>{{else}}<span class="ok">no anomalies</span>{{end}}</p>
<p id="status" class="meta">drawing…</p>
<div class="legend">
<span><i class="sw" style="background:#4f7fd1"></i>message (a turn)</span>
<span><i class="sw" style="background:#3aa26b"></i>late completion</span>
<span><i class="sw" style="background:#b9bfc9"></i>span without a session</span>
<span><i class="sw" style="background:#e0453a"></i>anomaly</span>
<span>dashed line: a turn and its completion &middot; hover a bar for its span</span>
</div>
{{range .Conversations}}
<section class="conversation" id="{{.Anchor}}">
<h2>{{.ID}}</h2>
<div class="meta">{{.Messages}} messages, {{.Comps}} completions{{if .Anomalies}}, <span class="bad">{{len .Anomalies}} anomalies</span>{{end}}</div>
<svg class="timeline" width="{{.Width}}" height="{{printf "%.0f" .Height}}" viewBox="0 0 {{.Width}} {{printf "%.1f" .Height}}" xmlns="http://www.w3.org/2000/svg">
{{range .Lanes}}<rect class="lane{{if .Odd}} odd{{end}}" x="0" y="{{printf "%.1f" .Y}}" width="100%" height="{{printf "%.1f" .H}}"/>
<text class="lanelabel" x="6" y="{{printf "%.1f" .Y}}" dy="15">{{.Service}}</text>
{{end}}{{range .Ticks}}<line class="tick" x1="{{printf "%.1f" .X}}" x2="{{printf "%.1f" .X}}" y1="14" y2="100%"/><text class="ticklabel" x="{{printf "%.1f" .X}}" y="11" text-anchor="{{.Anchor}}">{{.Label}}</text>
{{end}}{{range .Bars}}<rect class="{{.Class}}" data-trace="{{.Trace}}" data-span="{{.SpanID}}" x="{{printf "%.1f" .X}}" y="{{printf "%.1f" .Y}}" width="{{printf "%.1f" .W}}" height="10" rx="1.5"><title>{{.Title}}</title></rect>
{{if .Anomaly}}<text class="mark" x="{{printf "%.1f" .MarkX}}" y="{{printf "%.1f" .MarkY}}">!</text>
{{end}}{{end}}{{range .Links}}<path class="link" data-trace="{{.Trace}}" d="{{.Path}}"/>
{{end}}</svg>
{{if .Anomalies}}<table><tr><th>anomaly</th><th>where</th><th>what</th></tr>
{{range .Anomalies}}<tr><td class="kind">{{.Kind}}</td><td><code>{{.Span}}</code><br><code>trace {{.TraceID}}</code></td><td>{{.Detail}}</td></tr>
{{end}}</table>{{end}}
</section>
{{end}}
<script>
(function () {
  // Hovering a bar highlights every span of its trace and its link.
  var all = document.querySelectorAll('[data-trace]');
  all.forEach(function (el) {
    el.addEventListener('mouseenter', function () {
      var id = el.getAttribute('data-trace');
      all.forEach(function (o) { if (o.getAttribute('data-trace') === id) o.classList.add('hi'); });
    });
    el.addEventListener('mouseleave', function () {
      all.forEach(function (o) { o.classList.remove('hi'); });
    });
  });
  // Say what was drawn: what a reader (and the browser test) checks.
  var svgs = document.querySelectorAll('svg.timeline');
  var drawn = 0;
  svgs.forEach(function (s) { if (s.getBBox().width > 0) drawn++; });
  document.getElementById('status').textContent = 'drawn: ' + drawn + ' timelines, ' +
    document.querySelectorAll('rect.lane').length + ' lanes, ' +
    document.querySelectorAll('rect.bar').length + ' bars, ' +
    document.querySelectorAll('path.link').length + ' links, ' +
    document.querySelectorAll('rect.bar.anomaly').length + ' anomalous spans';
})();
</script>
</body>
</html>
`))
