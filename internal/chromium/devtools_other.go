//go:build !unix

package chromium

import (
	"image"
	"testing"
)

// Viewport is the size of a page's viewport in CSS pixels; Mobile emulates a phone.
type Viewport struct {
	Width, Height int
	Mobile        bool
}

// Inspect needs the browser's DevTools pipe (its fds 3 and 4), which only unix passes on.
func Inspect(t testing.TB, bin, url string, v Viewport, expr string, out any) (string, image.Image) {
	t.Helper()
	t.Fatal("chromium.Inspect drives the browser over --remote-debugging-pipe, which needs unix")
	return "", nil
}

// Page is what a page loaded through a proxy showed.
type Page struct {
	Status int
	Text   string
}

// ThroughProxy needs the browser's DevTools pipe too.
func ThroughProxy(t testing.TB, bin, url, proxy, user, pass, spki string) Page {
	t.Helper()
	t.Fatal("chromium.ThroughProxy drives the browser over --remote-debugging-pipe, which needs unix")
	return Page{}
}
