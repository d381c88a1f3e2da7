//go:build unix

package chromium

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// Page is what a page loaded through a proxy showed: the HTTP status of the document and
// its text.
type Page struct {
	Status int
	Text   string
}

// ThroughProxy loads url in headless chromium through the HTTP proxy at proxy (host:port),
// as Playwright's and Puppeteer's proxy options do: --proxy-server names the proxy, and the
// proxy's 407 is answered with user and pass over the DevTools protocol (Fetch.authRequired;
// chromium takes no credentials in --proxy-server). Loopback addresses go through the proxy
// too (--proxy-bypass-list=<-loopback>), and the one certificate whose public key hashes to
// spki (base64 SHA-256 of its SubjectPublicKeyInfo) is trusted, so a test's own origin can
// stand in for a site. A 407 answered more than a few times (wrong credentials) is given up,
// and the page's error says so.
func ThroughProxy(t testing.TB, bin, url, proxy, user, pass, spki string) Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	d := startDevtools(t, ctx, bin, []string{"--proxy-server=http://" + proxy, "--proxy-bypass-list=<-loopback>",
		"--ignore-certificate-errors-spki-list=" + spki})
	p, err := d.throughProxy(ctx, url, user, pass)
	if err != nil {
		t.Fatalf("chromium through the proxy %s to %s: %v\n%s", proxy, url, err, d.stderr.Bytes())
	}
	return p
}

// maxAuthAnswers bounds the credentials given for one page: a proxy that asks again refused
// them.
const maxAuthAnswers = 4

func (d *devtools) throughProxy(ctx context.Context, url, user, pass string) (Page, error) {
	var target struct{ TargetID string }
	if err := d.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return Page{}, err
	}
	var attached struct{ SessionID string }
	if err := d.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached); err != nil {
		return Page{}, err
	}
	s := attached.SessionID
	for _, m := range []string{"Page.enable"} {
		if err := d.call(ctx, s, m, nil, nil); err != nil {
			return Page{}, err
		}
	}
	if err := d.call(ctx, s, "Fetch.enable", map[string]any{"handleAuthRequests": true}, nil); err != nil {
		return Page{}, err
	}
	nav, err := d.send(s, "Page.navigate", map[string]any{"url": url})
	if err != nil {
		return Page{}, err
	}
	if err := d.serveUntilLoaded(ctx, s, nav, user, pass); err != nil {
		return Page{}, err
	}
	var eval struct {
		Result           struct{ Value string }
		ExceptionDetails *struct{ Text string }
	}
	expr := `JSON.stringify({status: performance.getEntriesByType("navigation")[0].responseStatus, text: document.body.innerText})`
	if err := d.call(ctx, s, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &eval); err != nil {
		return Page{}, err
	}
	if eval.ExceptionDetails != nil {
		return Page{}, fmt.Errorf("evaluate: %s", eval.ExceptionDetails.Text)
	}
	var page struct {
		Status int
		Text   string
	}
	if err := json.Unmarshal([]byte(eval.Result.Value), &page); err != nil {
		return Page{}, fmt.Errorf("evaluate: %w (value %s)", err, eval.Result.Value)
	}
	return Page{Status: page.Status, Text: page.Text}, nil
}

// serveUntilLoaded lets the paused requests go on and answers the proxy's challenges until
// the page has loaded; a navigation that fails is an error.
func (d *devtools) serveUntilLoaded(ctx context.Context, s string, nav int, user, pass string) error {
	answers := 0
	for {
		m, err := d.next(ctx, "Page.loadEventFired")
		if err != nil {
			return err
		}
		if m.ID == nav {
			var r struct{ ErrorText string }
			if m.Error != nil {
				return errors.New("navigate: " + m.Error.Message)
			}
			if json.Unmarshal(m.Result, &r) == nil && r.ErrorText != "" {
				return errors.New("navigate: " + r.ErrorText)
			}
		}
		if m.SessionID != s {
			continue
		}
		var p struct {
			RequestID     string `json:"requestId"`
			AuthChallenge struct {
				Source string `json:"source"`
			} `json:"authChallenge"`
		}
		_ = json.Unmarshal(m.Params, &p)
		switch m.Method {
		case "Page.loadEventFired":
			return nil
		case "Fetch.requestPaused":
			_, err = d.send(s, "Fetch.continueRequest", map[string]any{"requestId": p.RequestID})
		case "Fetch.authRequired":
			answer := map[string]any{"response": "CancelAuth"}
			if p.AuthChallenge.Source == "Proxy" && answers < maxAuthAnswers {
				answers++
				answer = map[string]any{"response": "ProvideCredentials", "username": user, "password": pass}
			}
			_, err = d.send(s, "Fetch.continueWithAuth", map[string]any{"requestId": p.RequestID, "authChallengeResponse": answer})
		}
		if err != nil {
			return err
		}
	}
}
