//go:build unix

package chromium

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Viewport is the size of a page's viewport in CSS pixels; Mobile emulates a phone (the page's
// viewport meta tag applies, as on one).
type Viewport struct {
	Width, Height int
	Mobile        bool
}

// Inspect loads url in a viewport of exactly v through the DevTools protocol over a pipe
// (--remote-debugging-pipe): --window-size cannot do that, as headless chromium widens a
// window to at least 500 pixels and takes its frame off the height. Once the page has loaded
// it evaluates expr there and decodes the expression's value (JSON) into out, then takes a
// screenshot of the viewport; it returns the PNG's path (in a directory of the test's) and
// the decoded image. The protocol runs expr whatever the page's Content-Security-Policy, so
// the page is measured as it is served, script-free.
func Inspect(t testing.TB, bin, url string, v Viewport, expr string, out any) (string, image.Image) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	d := startDevtools(t, ctx, bin, nil)
	shot, err := d.inspect(ctx, url, v, expr, out)
	if err != nil {
		t.Fatalf("chromium DevTools on %s at %dx%d: %v\n%s", url, v.Width, v.Height, err, d.stderr.Bytes())
	}
	path := filepath.Join(t.TempDir(), "screenshot.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != v.Width || b.Dy() != v.Height {
		t.Errorf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), v.Width, v.Height)
	}
	return path, img
}

// devtools is one browser driven over its pipe: commands are written to its fd 3, answers
// and events read from its fd 4, each a JSON message ended by a NUL byte.
type devtools struct {
	in     *os.File        // the browser's fd 3
	msgs   chan cdpMessage // from the browser's fd 4; closed when it closes
	stderr bytes.Buffer
	nextID int
	events []cdpMessage // events read while waiting for an answer
}

type cdpMessage struct {
	ID        int             `json:"id"`
	Method    string          `json:"method"`
	SessionID string          `json:"sessionId"`
	Params    json.RawMessage `json:"params"`
	Result    json.RawMessage `json:"result"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// startDevtools starts the browser with extra flags; the test's cleanup kills its process
// group and waits for the reader, which ends when the browser's end of the pipe closes.
func startDevtools(t testing.TB, ctx context.Context, bin string, extra []string) *devtools {
	t.Helper()
	toBrowser, in, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, fromBrowser, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &devtools{in: in, msgs: make(chan cdpMessage)}
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--remote-debugging-pipe", "--user-data-dir=" + t.TempDir()}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, "about:blank")...)
	cmd.ExtraFiles = []*os.File{toBrowser, fromBrowser}
	cmd.Stderr = &d.stderr
	ownProcessGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	_ = toBrowser.Close() // the browser's copies remain
	_ = fromBrowser.Close()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer close(d.msgs)
		r := bufio.NewReader(outR)
		for {
			b, err := r.ReadBytes(0)
			if err != nil {
				return
			}
			var m cdpMessage
			if json.Unmarshal(b[:len(b)-1], &m) != nil {
				continue
			}
			select {
			case d.msgs <- m:
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		killProcessGroup(cmd)
		_ = cmd.Wait()
		_ = in.Close()
		_ = outR.Close()
		<-done
	})
	return d
}

func (d *devtools) inspect(ctx context.Context, url string, v Viewport, expr string, out any) ([]byte, error) {
	var target struct{ TargetID string }
	if err := d.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	var attached struct{ SessionID string }
	if err := d.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached); err != nil {
		return nil, err
	}
	s := attached.SessionID
	if err := d.call(ctx, s, "Page.enable", nil, nil); err != nil {
		return nil, err
	}
	if err := d.call(ctx, s, "Emulation.setDeviceMetricsOverride", map[string]any{"width": v.Width, "height": v.Height,
		"deviceScaleFactor": 1, "mobile": v.Mobile}, nil); err != nil {
		return nil, err
	}
	var nav struct{ ErrorText string }
	if err := d.call(ctx, s, "Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		return nil, err
	}
	if nav.ErrorText != "" {
		return nil, fmt.Errorf("navigate: %s", nav.ErrorText) // no load event would come
	}
	if err := d.wait(ctx, s, "Page.loadEventFired"); err != nil {
		return nil, err
	}
	var eval struct {
		Result           struct{ Value json.RawMessage }
		ExceptionDetails *struct{ Text string }
	}
	if err := d.call(ctx, s, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &eval); err != nil {
		return nil, err
	}
	if eval.ExceptionDetails != nil {
		return nil, fmt.Errorf("evaluate: %s", eval.ExceptionDetails.Text)
	}
	if err := json.Unmarshal(eval.Result.Value, out); err != nil {
		return nil, fmt.Errorf("evaluate: %w (value %s)", err, eval.Result.Value)
	}
	var shot struct{ Data string }
	if err := d.call(ctx, s, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(shot.Data)
}

// send sends method to session ("" for the browser) and returns its id without waiting for
// the answer.
func (d *devtools) send(session, method string, params any) (int, error) {
	d.nextID++
	id := d.nextID
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return 0, err
	}
	if _, err := d.in.Write(append(b, 0)); err != nil {
		return 0, fmt.Errorf("%s: %w", method, err)
	}
	return id, nil
}

// call sends method to session ("" for the browser) and decodes its answer into result.
func (d *devtools) call(ctx context.Context, session, method string, params, result any) error {
	id, err := d.send(session, method, params)
	if err != nil {
		return err
	}
	for {
		m, err := d.next(ctx, method)
		if err != nil {
			return err
		}
		if m.ID != id {
			if m.Method != "" {
				d.events = append(d.events, m)
			}
			continue
		}
		if m.Error != nil {
			return fmt.Errorf("%s: %s", method, m.Error.Message)
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(m.Result, result)
	}
}

// wait returns once session has sent the event method, which may already have come.
func (d *devtools) wait(ctx context.Context, session, method string) error {
	for {
		for _, e := range d.events {
			if e.Method == method && e.SessionID == session {
				return nil
			}
		}
		d.events = d.events[:0]
		m, err := d.next(ctx, method)
		if err != nil {
			return err
		}
		d.events = append(d.events, m)
	}
}

func (d *devtools) next(ctx context.Context, waitingFor string) (cdpMessage, error) {
	select {
	case <-ctx.Done():
		return cdpMessage{}, fmt.Errorf("waiting for %s: %w", waitingFor, ctx.Err())
	case m, ok := <-d.msgs:
		if !ok {
			return cdpMessage{}, errors.New("the browser closed its DevTools pipe while waiting for " + waitingFor)
		}
		return m, nil
	}
}
