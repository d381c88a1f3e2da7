// Package chromium runs Debian's headless chromium for tests that look at the status page in
// a real browser (readside/statuspage, and cmd/egressd's end-to-end tests), and reads its
// screenshots; and for tests that load a page through a proxy as a crawler's browser does
// (workers/gateway).
package chromium

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Timeout bounds one browser run; a hung browser fails the test instead of the CI job.
const Timeout = 30 * time.Second

// Path finds Debian's chromium. Its absence fails the test: skipping would let CI pass
// without anyone having looked at the page in a browser.
func Path(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("chromium is not installed: this test loads the status page in Debian's headless chromium. " +
		".ci/run installs it; on a workstation run `apt-get install -y chromium`")
	return ""
}

// Run loads url in headless chromium with extra flags and returns its stdout.
func Run(t testing.TB, bin, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ownProcessGroup(cmd)
	// Children that keep stdout open must not hold Wait past the timeout.
	cmd.WaitDelay = 5 * time.Second
	t.Cleanup(func() { killProcessGroup(cmd) })
	err := cmd.Run()
	killProcessGroup(cmd)
	if ctx.Err() != nil {
		t.Fatalf("chromium did not finish within %s\n%s", Timeout, stderr.Bytes())
	}
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(extra, " "), err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// Screenshot loads url in a window of w by h pixels and returns the PNG's path (in a
// directory of the test's) and the decoded image, checked to be that size.
func Screenshot(t testing.TB, bin, url string, w, h int) (string, image.Image) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "screenshot.png")
	Run(t, bin, url, "--screenshot="+path, fmt.Sprintf("--window-size=%d,%d", w, h))
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Errorf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), w, h)
	}
	return path, img
}

// RGB is a colour without alpha, 8 bits a channel.
type RGB [3]int

// Hex reads "#rrggbb".
func Hex(t testing.TB, s string) RGB {
	t.Helper()
	var c RGB
	if _, err := fmt.Sscanf(s, "#%02x%02x%02x", &c[0], &c[1], &c[2]); err != nil {
		t.Fatalf("colour %q: %v", s, err)
	}
	return c
}

func rgbOf(c color.Color) RGB {
	r, g, b, _ := c.RGBA()
	return RGB{int(r >> 8), int(g >> 8), int(b >> 8)}
}

// Bounds is the smallest rectangle holding every pixel of exactly colour c (empty: none).
func Bounds(img image.Image, c RGB) image.Rectangle {
	var r image.Rectangle
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if rgbOf(img.At(x, y)) == c {
				r = r.Union(image.Rect(x, y, x+1, y+1))
			}
		}
	}
	return r
}

// CountNear counts the pixels of area within tol of c on every channel: a line's
// anti-aliased core, without its blended edges.
func CountNear(img image.Image, area image.Rectangle, c RGB, tol int) int {
	n := 0
	for y := area.Min.Y; y < area.Max.Y; y++ {
		for x := area.Min.X; x < area.Max.X; x++ {
			p := rgbOf(img.At(x, y))
			if abs(p[0]-c[0]) <= tol && abs(p[1]-c[1]) <= tol && abs(p[2]-c[2]) <= tol {
				n++
			}
		}
	}
	return n
}

// Colours counts the distinct colours of a grid of img's pixels, every step pixels: a blank
// page has a handful.
func Colours(img image.Image, step int) int {
	seen := map[RGB]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += step {
		for x := b.Min.X; x < b.Max.X; x += step {
			seen[rgbOf(img.At(x, y))] = true
		}
	}
	return len(seen)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// CheckPlot finds a chart's plot area in img by its background colour (which nothing else on
// the page may have) and checks that each of colours is drawn inside it at least min times:
// the lines are there, not just an empty frame or a legend beside it.
func CheckPlot(t testing.TB, img image.Image, background string, colours []string, min int) image.Rectangle {
	t.Helper()
	plot := Bounds(img, Hex(t, background))
	if plot.Dx() < 300 || plot.Dy() < 100 {
		t.Fatalf("no plot area in the screenshot (its background %s covers %v)", background, plot)
	}
	for _, c := range colours {
		if n := CountNear(img, plot, Hex(t, c), 24); n < min {
			t.Errorf("the plot area %v has %d pixels of the series colour %s, want at least %d: its line is not drawn", plot, n, c, min)
		} else {
			t.Logf("series %s: %d pixels in the plot area %v", c, n, plot)
		}
	}
	return plot
}
