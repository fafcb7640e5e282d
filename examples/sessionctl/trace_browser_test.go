package main

// The timeline page in a real browser: Debian's chromium, headless. The page
// must load from a file with no network, its script must run, and the lanes
// and bars of a recorded run must be drawn (counted in the DOM the browser
// built, and seen in the pixels of a screenshot, which is kept).

import (
	"bytes"
	"context"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium finds the browser: SESSIONWIRE_CHROMIUM, or chromium on PATH.
// Outside CI the test skips without one; in CI (.ci/run installs it) it
// fails.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SESSIONWIRE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not found: .ci/run installs Debian's chromium package (apt-get install chromium)")
	}
	t.Skip("chromium not found: install it (apt-get install chromium) or set SESSIONWIRE_CHROMIUM to run the browser test")
	return ""
}

// artifacts is where screenshots are kept: SESSIONWIRE_ARTIFACTS (which
// .ci/run sets and lists), or the test's temporary directory.
func artifacts(t *testing.T) string {
	if dir := os.Getenv("SESSIONWIRE_ARTIFACTS"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return dir
	}
	return t.TempDir()
}

func headless(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	// A bound, not a target: on a loaded two-core machine one start of the
	// browser has taken over a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// No sandbox: CI runs as root, where chromium refuses it. The page is
	// our own file and the browser is kept offline.
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, errOut.String())
	}
	return out.Bytes()
}

var statusRE = regexp.MustCompile(`drawn: (\d+) timelines, (\d+) lanes, (\d+) bars, (\d+) links, (\d+) anomalous spans`)

func TestTimelineInChromium(t *testing.T) {
	bin := chromium(t)
	dir := artifacts(t)
	for _, tc := range []struct {
		name, fixture string
		barColor      color.RGBA // a colour only bars of this run have
	}{
		{"baggage", fixtureBaggage, color.RGBA{0x4f, 0x7f, 0xd1, 0xff}},
		{"env", fixtureEnv, color.RGBA{0xe0, 0x45, 0x3a, 0xff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := exploreFile(t, tc.fixture)
			ex.Query = "every trace in " + tc.fixture
			page := filepath.Join(dir, "timeline-"+tc.name+".html")
			require.NoError(t, writeHTMLFile(page, ex))
			raw, err := os.ReadFile(page)
			require.NoError(t, err)
			// Self-contained: nothing for a browser to fetch.
			for _, ref := range []string{"src=", "href=", "url(", "@import", "<link", "fetch(", "XMLHttpRequest"} {
				assert.NotContains(t, string(raw), ref, "the page must not load anything")
			}

			want := struct{ timelines, lanes, bars, links, anomalous int }{timelines: len(ex.Conversations), bars: ex.Spans}
			for _, c := range ex.Conversations {
				want.lanes += len(c.Services)
				for _, tr := range c.Traces {
					if tr.Origin != nil {
						want.links++
					}
					for _, s := range tr.Spans {
						if s.Anomaly {
							want.anomalous++
						}
					}
				}
			}
			require.Positive(t, want.bars)

			// One start of the browser: the DOM after the page's script ran,
			// and a screenshot.
			shot := filepath.Join(dir, "timeline-"+tc.name+".png")
			dom := headless(t, bin, "--window-size=1280,1600", "--screenshot="+shot, "--dump-dom", "file://"+page)
			m := statusRE.FindStringSubmatch(string(dom))
			require.NotNil(t, m, "the page's script did not run: no status line in the DOM")
			got := fmt.Sprintf("%s/%s/%s/%s/%s", m[1], m[2], m[3], m[4], m[5])
			assert.Equal(t, fmt.Sprintf("%d/%d/%d/%d/%d", want.timelines, want.lanes, want.bars, want.links, want.anomalous), got,
				"timelines/lanes/bars/links/anomalous spans drawn")
			if tc.name == "env" {
				assert.Positive(t, want.anomalous)
			} else {
				assert.Positive(t, want.links, "a turn and its late completion are linked")
			}
			assert.Equal(t, want.lanes, strings.Count(string(dom), `class="lanelabel"`))

			f, err := os.Open(shot)
			require.NoError(t, err)
			defer f.Close()
			img, err := png.Decode(f)
			require.NoError(t, err, "the screenshot is a PNG")
			b := img.Bounds()
			require.Equal(t, 1280, b.Dx())
			painted := 0
			for y := b.Min.Y; y < b.Max.Y; y++ {
				for x := b.Min.X; x < b.Max.X; x++ {
					if color.RGBAModel.Convert(img.At(x, y)) == tc.barColor {
						painted++
					}
				}
			}
			// The legend's swatch alone is about 120 pixels.
			assert.Greater(t, painted, 1000, "bars in %v painted on the screenshot", tc.barColor)
			where := "kept"
			if os.Getenv("SESSIONWIRE_ARTIFACTS") == "" {
				where = "removed after the test; set SESSIONWIRE_ARTIFACTS=DIR to keep it"
			}
			t.Logf("screenshot %s (%s): %d pixels of bar colour", shot, where, painted)
		})
	}
}
