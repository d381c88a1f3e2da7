package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats.go/jetstream"
)

// integrationsEnvVar set to "required" (.ci/run sets it) makes a missing Scrapy or Crawlee a
// failure; elsewhere the test is skipped without them.
const integrationsEnvVar = "EGRESSD_INTEGRATIONS"

// integrationsDir is integrations/ of this repository.
func integrationsDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("../../../integrations")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// needIntegrations checks for Debian's Scrapy (of /usr/bin/python3, not whatever python3 is
// first on PATH) and for node with integrations/crawlee's packages (npm ci).
func needIntegrations(t *testing.T) {
	t.Helper()
	var missing []string
	if err := exec.Command("/usr/bin/python3", "-c", "import scrapy").Run(); err != nil {
		missing = append(missing, "Scrapy for /usr/bin/python3 (apt-get install python3-scrapy)")
	}
	// The Scrapy integration is pip-installed into a virtualenv: Debian's venv, pip and setuptools.
	if err := exec.Command("/usr/bin/python3", "-c", "import setuptools, venv, pip").Run(); err != nil {
		missing = append(missing, "venv, pip and setuptools for /usr/bin/python3 (apt-get install python3-venv python3-pip python3-setuptools)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	}
	if _, err := os.Stat(filepath.Join(integrationsDir(t), "crawlee/node_modules/crawlee")); err != nil {
		missing = append(missing, "Crawlee's packages (npm ci in integrations/crawlee)")
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv(integrationsEnvVar) == "required" {
		t.Fatalf("%s=required, and missing: %s (.ci/run installs them)", integrationsEnvVar, strings.Join(missing, ", "))
	}
	t.Skipf("SKIPPED: missing %s; .ci/run installs them and sets %s=required", strings.Join(missing, ", "), integrationsEnvVar)
}

// site is a local web site: / links to pages a, b and c, to /blocked, which answers 403, to
// /challenge, a 200 whose page is a captcha, and to /moved/1 … /moved/<siteRedirects>, each a
// redirect to /c (more redirects than the proxies have slots: a crawler that kept a lease per
// redirect would run out); it records who fetched each path.
type site struct {
	url  string
	mu   sync.Mutex
	hits map[string][]string // path → remote hosts
}

// siteRedirects is how many redirects the site links to: more than the 8 slots of the
// end-to-end test's proxies.
const siteRedirects = 10

func startSite(t *testing.T, addr string) *site {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &site{url: "http://" + ln.Addr().String(), hits: map[string][]string{}}
	page := func(title string, links ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "<html><head><title>%s</title></head><body>", title)
		for _, l := range links {
			fmt.Fprintf(&b, `<a href="%s">%s</a> `, l, l)
		}
		return b.String() + "</body></html>"
	}
	links := []string{"/a", "/b", "/c", "/blocked", "/challenge"}
	for i := range siteRedirects {
		links = append(links, fmt.Sprintf("/moved/%d", i+1))
	}
	pages := map[string]string{
		"/":          page("home", links...),
		"/challenge": page("Please solve this CAPTCHA"),
		"/a":         page("a", "/b", "/"), "/b": page("b", "/c"), "/c": page("c", "/a"),
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		s.mu.Lock()
		s.hits[r.URL.Path] = append(s.hits[r.URL.Path], host)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if strings.HasPrefix(r.URL.Path, "/moved/") {
			http.Redirect(w, r, "/c", http.StatusFound)
			return
		}
		if r.URL.Path == "/blocked" {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, page("Access denied"))
			return
		}
		body, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, body)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *site) seen() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for k, v := range s.hits {
		out[k] = slices.Clone(v)
	}
	return out
}

// runTool runs a crawler to its end (2 minutes at most) and returns its output.
func runTool(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "OTEL_") || strings.HasPrefix(kv, "http_proxy=") || strings.HasPrefix(kv, "HTTP_PROXY=")
	}), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// reports reads every report event stored on EGRESS_LEASE_EVENTS.
func reports(t *testing.T, js jetstream.JetStream) []events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, events.StreamLeaseEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"egress.events.report.>"}})
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var ev events.Event
			if err := json.Unmarshal(m.Data(), &ev); err == nil {
				out = append(out, ev)
			}
		}
		if n == 0 {
			return out
		}
	}
}

// The Scrapy middleware and the Crawlee proxy configuration, each run for real against a
// local site through proxies leased from `egressd run` (Scrapy over the HTTP face, Crawlee
// over NATS): every page is fetched through a leased proxy (the site sees the proxies'
// addresses, never the crawler's) with lease-bound credentials, the 403 page is reported
// blocked by its holder, and no lease is left once the crawler has exited. The bearer token
// appears in no log or metric.
func TestIntegrationsEndToEnd(t *testing.T) {
	needNats(t)
	needIntegrations(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	token := "egt_SENTINEL_" + hex.EncodeToString([]byte(t.Name()))[:24]
	sum := leaser.TokenHash(token)
	cfg := filepath.Join(dir, "egressd.yaml")
	if err := os.WriteFile(cfg, []byte("providers:\n  - name: local\n    type: local\n    local:\n      addresses: [127.0.86.2-127.0.86.250]\n      bindSource: true\n"+
		"leaseHTTP:\n  crawlers:\n    - name: scrapy-e2e\n      tokenSHA256: "+hex.EncodeToString(sum[:])+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	leaseAddr := freeAddr(t)
	n := startNode(t, dir, "--config", cfg, "--lease-http-listen", leaseAddr)
	hc := `"healthCheck":{"intervalSeconds":1,"timeoutSeconds":1,"failureThreshold":2,"successThreshold":1}`
	names := []string{"ig-1", "ig-2", "ig-3", "ig-4"}
	for _, name := range names {
		n.nats("kv", "put", "proxies", name, `{"provider":"local","maxLeases":2,"attributes":{"e2e":"integrations"},"auth":{"mode":"lease"},`+hc+`}`)
	}
	rows := n.waitRows("the proxies Ready", time.Minute, allPhase(names, events.PhaseReady))
	proxyHosts := map[string]bool{}
	for _, name := range names {
		host, _, _ := net.SplitHostPort(rows[name].Address)
		proxyHosts[host] = true
	}
	_, js := n.client()
	store, err := kvstore.Bind(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	acquire := `{"selector":{"e2e":"integrations"},"ttlSeconds":120}`
	ig := integrationsDir(t)

	// checks holds for one crawler's run: pages through proxies, the block reported, no lease.
	checks := func(t *testing.T, s *site, holder, out string) {
		seen := s.seen()
		for _, path := range []string{"/", "/a", "/b", "/c", "/blocked", "/challenge"} {
			if len(seen[path]) == 0 {
				t.Errorf("%s was not fetched", path)
			}
			for _, h := range seen[path] {
				if !proxyHosts[h] {
					t.Errorf("%s was fetched from %s, not through a leased proxy (%v)", path, h, proxyHosts)
				}
			}
		}
		target, _, _ := net.SplitHostPort(strings.TrimPrefix(s.url, "http://"))
		waitUntil(t, "the blocked report", 10*time.Second, func() (bool, string) {
			for _, ev := range reports(t, js) {
				if ev.Reason == events.Reason(events.ReportBlocked) && ev.Lease != nil && ev.Lease.Holder == holder && ev.Lease.Target == target {
					return true, ""
				}
			}
			return false, "no report of kind blocked from " + holder + " for " + target
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		held, err := store.Leases.Held(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(held) != 0 {
			t.Errorf("leases left behind by %s: %v", holder, held)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", holder, out)
		}
	}

	// Each run crawls a site of its own (another target), so the cooldown one run's blocks
	// set does not take proxies from the next. The per-session run has leases of 5 s and a
	// download delay of 1 s, so it lasts past the first token's expiry: its later requests
	// get through only with the renewals' URLs. The per-request run retries each blocked page
	// once on a new lease, with cooldowns of 2 s so that four blocks leave proxies to retry on.
	python := scrapyVenv(t, ig)
	for _, c := range []struct {
		mode, site, ttl, delay, retries, cooldown string
		blocks                                    int
	}{{"session", "127.0.86.1:0", "5", "1", "0", "0", 2}, {"request", "127.0.87.2:0", "120", "0", "1", "2", 4}} {
		t.Run("scrapy over the HTTP face, a lease per "+c.mode, func(t *testing.T) {
			s := startSite(t, c.site)
			var waited <-chan bool
			if c.mode == "request" {
				waited = holdUntilAWaiter(t, n, store)
			}
			out := runTool(t, filepath.Join(ig, "scrapy/example"), []string{
				"EGRESSD_LEASE_URL=http://" + leaseAddr,
				"EGRESSD_LEASE_TOKEN=" + token, "EGRESSD_LEASE_MODE=" + c.mode,
				`EGRESSD_ACQUIRE={"selector":{"e2e":"integrations"},"ttlSeconds":` + c.ttl + `}`,
				"SCRAPY_DOWNLOAD_DELAY=" + c.delay, "EGRESSD_BLOCK_RETRIES=" + c.retries,
				"EGRESSD_BLOCK_COOLDOWN=" + c.cooldown, "SCRAPY_LOG_LEVEL=DEBUG",
			}, python, "-m", "scrapy", "crawl", "site", "-a", "start_url="+s.url+"/")
			if waited != nil && !<-waited {
				t.Errorf("with every slot held, the crawl's acquire did not wait in the service (no wait.<id> record)")
			}
			checks(t, s, "scrapy-e2e", out)
			if strings.Contains(out, "Crawled (407)") {
				t.Errorf("a proxy refused a lease's credentials (407)")
			}
			// A redirect is answered by Scrapy's RedirectMiddleware before this middleware
			// sees the response: its lease must still be given back, or the redirects alone
			// hold every slot and acquires find none.
			if seen := s.seen(); len(seen["/moved/1"]) == 0 || strings.Contains(out, "lease service: 503") {
				t.Errorf("redirects not fetched, or an acquire found no free proxy (leases kept by redirected requests)")
			}
			if c.mode == "session" && !strings.Contains(out, "'egressd/renewed'") {
				t.Errorf("the session's lease was never renewed:\n%s", out)
			}
			// The 403 and the captcha page (/challenge) are blocks, each fetched once more per retry.
			if want := fmt.Sprintf("'egressd/blocked': %d,", c.blocks); !strings.Contains(out, want) {
				t.Errorf("Scrapy's stats do not say %s:\n%s", want, out)
			}
			if seen := s.seen(); len(seen["/blocked"]) != c.blocks/2 || len(seen["/challenge"]) != c.blocks/2 {
				t.Errorf("/blocked fetched %d times, /challenge %d, want %d each", len(seen["/blocked"]), len(seen["/challenge"]), c.blocks/2)
			}
			if strings.Contains(out, "SENTINEL") {
				t.Errorf("Scrapy's output carries the token")
			}
		})
	}

	t.Run("crawlee over NATS", func(t *testing.T) {
		s := startSite(t, "127.0.87.1:0")
		project := crawleeProject(t, ig)
		out := runTool(t, project, []string{
			"NATS_URL=" + n.url, "START_URL=" + s.url + "/", "EGRESSD_HOLDER=crawlee-e2e", "EGRESSD_ACQUIRE=" + acquire,
			"CRAWLEE_STORAGE_DIR=" + filepath.Join(dir, "crawlee-storage"), "EGRESSD_BLOCK_COOLDOWN=2",
		}, "node", "node_modules/egressd-crawlee/example/crawl.js")
		checks(t, s, "crawlee-e2e", out)
		if !strings.Contains(out, "reported blocked (captcha): "+s.url+"/challenge") {
			t.Errorf("the captcha page was not seen as one")
		}
		// Every proxy that served a block is reported: a 403 by the hook, the captcha by
		// retiring its session. Reports count leases, not pages: two blocked pages fetched
		// at once on one session's lease give one report (the lease is given back with the
		// first), so the check is per proxy.
		blockedVia := map[string]bool{}
		seen := s.seen()
		for _, h := range append(seen["/blocked"], seen["/challenge"]...) {
			for name, row := range rows {
				if host, _, _ := net.SplitHostPort(row.Address); host == h {
					blockedVia[name] = true
				}
			}
		}
		waitUntil(t, "a report per proxy that served a block", 10*time.Second, func() (bool, string) {
			missing := maps.Clone(blockedVia)
			for _, ev := range reports(t, js) {
				if ev.Reason == events.Reason(events.ReportBlocked) && ev.Lease != nil && ev.Lease.Holder == "crawlee-e2e" {
					delete(missing, ev.Proxy)
				}
			}
			return len(missing) == 0, fmt.Sprintf("no blocked report from crawlee-e2e for %v (blocks served by %v)", slices.Sorted(maps.Keys(missing)), slices.Sorted(maps.Keys(blockedVia)))
		})
	})

	t.Run("the token is in no log or metric", func(t *testing.T) {
		if strings.Contains(n.logs(), "SENTINEL") || !strings.Contains(n.logs(), "lease HTTP face started") {
			t.Errorf("egressd's log carries the token, or is not captured")
		}
		m := regexp.MustCompile(`msg="serving /metrics and /healthz".*? url=(\S+)`).FindStringSubmatch(n.logs())
		if m == nil {
			t.Fatal("no metrics address in the log")
		}
		resp, err := http.Get(m[1] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(b), "SENTINEL") || !strings.Contains(string(b), `egress_lease_requests_total{endpoint="acquire",result="granted"}`) {
			t.Errorf("the metrics carry the token, or count no grant")
		}
	})
}

// holdUntilAWaiter takes every slot of the integrations' four proxies and gives them back
// once an acquire waits for one in the service (a wait.<id> record in lease_state, as
// docs/leases.md#waiting says), or after 30 s; the channel says whether one did.
func holdUntilAWaiter(t *testing.T, n *node, store *kvstore.Store) <-chan bool {
	t.Helper()
	nc, _ := n.client()
	lc := client.New(nc)
	var ids []string
	for range 8 {
		g, err := lc.AcquireOnce(t.Context(), client.AcquireOptions{Selector: map[string]string{"e2e": "integrations"}, TTL: 2 * time.Minute, Holder: "hog"})
		if err != nil {
			t.Fatalf("hold every slot: %v", err)
		}
		ids = append(ids, g.ID)
	}
	out := make(chan bool, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		saw := false
		for deadline := time.Now().Add(30 * time.Second); !saw && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if keys, err := store.LeaseState.ListKeys(ctx); err == nil {
				for k := range keys.Keys() {
					saw = saw || strings.HasPrefix(k, "wait.")
				}
			}
		}
		for _, id := range ids {
			_, _ = lc.Release(ctx, id)
		}
		out <- saw
	}()
	return out
}
