package gateway_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/chromium"
)

// A browser uses the gateway as Puppeteer drives it: headless chromium with --proxy-server at
// the gateway, the crawler's username (a pool, an attribute and a session) and token given
// over DevTools when the gateway asks (407), as page.authenticate does. A plain page and an
// HTTPS page (CONNECT, the origin's own certificate) load, each through a fleet proxy, and
// both on the session's one proxy.
func TestGatewayInAHeadlessBrowser(t *testing.T) {
	bin := chromium.Path(t)
	r := newRig(t, 3)
	gw, _ := r.gateway(nil)
	spki := originSPKI(t, r)
	pagesOnOneProxy(t, r, "chromium", func(u string) string {
		page := chromium.ThroughProxy(t, bin, u, gw, "crawler-7-pool-web-geo-de-session-b1", testToken, spki)
		return strconv.Itoa(page.Status) + " " + page.Text
	})
}

// Playwright itself (playwright-core, pinned in testdata/playwright, driving Debian's chromium)
// loads a plain and an HTTPS page through the gateway with its proxy option: server,
// username and password, the session's one fleet proxy carrying both.
func TestGatewayWithPlaywright(t *testing.T) {
	bin := chromium.Path(t)
	dir := playwrightDir(t)
	if dir == "" {
		return
	}
	r := newRig(t, 3)
	gw, _ := r.gateway(nil)
	spki := originSPKI(t, r)
	pagesOnOneProxy(t, r, "playwright", func(u string) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", filepath.Join(dir, "fetch.mjs"), u, gw, "crawler-7-pool-web-session-pw1", testToken, spki)
		cmd.Env = append(os.Environ(), "CHROMIUM="+bin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%v: %s", err, out)
		}
		return string(out)
	})
}

// pagesOnOneProxy loads the plain and the HTTPS page with load, which returns what the
// browser showed ("STATUS TEXT"), and checks that each reached the origin from a fleet proxy,
// both from the same one (the session's).
func pagesOnOneProxy(t *testing.T, r *rig, client string, load func(u string) string) {
	t.Helper()
	var seen []string
	for _, o := range []*origin{r.origin, r.tlsOrig} {
		if got := load(o.url + "/" + client); !strings.HasPrefix(got, "200 hello "+rigNet) {
			t.Fatalf("%s through the gateway to %s: %s", client, o.url, got)
		}
		src := o.sources()
		if len(src) == 0 || r.sources[src[len(src)-1]] == "" {
			t.Fatalf("%s saw %v, no fleet proxy", o.url, src)
		}
		seen = append(seen, src[len(src)-1])
	}
	if seen[0] != seen[1] {
		t.Errorf("the session's pages left through two proxies: %v", seen)
	}
}

// playwrightDir is testdata/playwright with its package installed (npm ci there; .ci/run
// does), or "" when it is not: then the test says so, and fails where the integrations are
// required (EGRESSD_INTEGRATIONS=required, as CI sets).
func playwrightDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("testdata/playwright")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "node_modules/playwright-core")); err == nil {
		if _, err := exec.LookPath("node"); err == nil {
			return d
		}
	}
	if os.Getenv("EGRESSD_INTEGRATIONS") == "required" {
		t.Fatal("EGRESSD_INTEGRATIONS=required, and playwright-core is missing: npm ci in workers/gateway/testdata/playwright (.ci/run does)")
	}
	t.Log("SKIPPED Playwright: npm ci in workers/gateway/testdata/playwright")
	return ""
}

// originSPKI is the base64 SHA-256 of the TLS origin's public key, which chromium is told to
// trust (the test's own CA is not in its store).
func originSPKI(t *testing.T, r *rig) string {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(r.tlsOrig.url, "https://"), &tls.Config{RootCAs: r.caPool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sum := sha256.Sum256(conn.ConnectionState().PeerCertificates[0].RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}
