package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/testcert"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser"
)

// The gateway's end-to-end test uses 127.0.62.x: the proxies' sources from .2, the plain
// origin on .1 (the TLS origin listens on 127.0.0.1, where its certificate says).
const (
	gwNet        = "127.0.62."
	gwFleetToken = "SENTINEL-gateway-fleet-pw"
	gwLeaseTTL   = 6 * time.Second
)

// gwOrigin is a web site recording the source of every request; it answers 429 to the
// sources in block.
type gwOrigin struct {
	url   string
	mu    sync.Mutex
	seen  []string
	block map[string]bool
}

func startGwOrigin(t *testing.T, addr string, tc *tls.Config) *gwOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	o := &gwOrigin{block: map[string]bool{}, url: "http://" + ln.Addr().String()}
	if tc != nil {
		ln, o.url = tls.NewListener(ln, tc), "https://"+ln.Addr().String()
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		o.mu.Lock()
		o.seen = append(o.seen, host)
		blocked := o.block[host]
		o.mu.Unlock()
		if blocked {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintf(w, "<html><title>hello %s</title></html>", host)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return o
}

func (o *gwOrigin) sources() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

func (o *gwOrigin) blockSource(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.block[s] = true
}

// startGatewayProcess runs `egressd gateway` against n's NATS.
func startGatewayProcess(t *testing.T, n *node, cfg, addr string) *node {
	t.Helper()
	g := &node{t: t, dir: t.TempDir(), listen: addr, url: n.url}
	g.args = []string{"gateway", "--nats-url", n.url, "--config", cfg, "--data-dir", filepath.Join(g.dir, "data"), "--gateway-listen", addr,
		"--metrics-listen", "127.0.0.1:0", "--log-level", "debug", "--gateway-lease-ttl", gwLeaseTTL.String(), "--gateway-idle-release", "2s"}
	t.Cleanup(func() {
		g.stop()
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.logs())
		}
	})
	g.start()
	return g
}

// gwClient is Go's net/http pointed at the gateway, trusting the TLS origin's CA.
func gwClient(t *testing.T, gw, user, token string, ca *x509.CertPool) *http.Client {
	pu := &url.URL{Scheme: "http", Host: gw, User: url.UserPassword(user, token)}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: ca}, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func gwGet(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestGatewayEndToEnd: `egressd run --gateway-listen` with a fleet of local proxies, and an
// `egressd gateway` replica beside it. curl, Go's net/http, Python requests and Scrapy (with
// only the http_proxy environment) fetch plain HTTP and HTTPS (CONNECT, a TLS origin with its
// own CA) through the gateway, each request leaving through a fleet proxy; a session stays on
// one proxy across both replicas and a restart of one; 100 session-less requests spread over
// the fleet; a 429 to one proxy is reported blocked and the next request goes elsewhere; a
// wrong token is 407 and a bad key is named; the fleet's password leaks nowhere; a gateway
// killed with -9 leaves no lease past its TTL.
func TestGatewayEndToEnd(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	token := "egt_" + hex.EncodeToString([]byte("gateway-e2e-token"))
	sum := leaser.TokenHash(token)
	cfg := filepath.Join(dir, "egressd.yaml")
	if err := os.WriteFile(cfg, []byte("providers:\n  - name: local\n    type: local\n    local:\n      addresses: ["+gwNet+"2-"+gwNet+"250]\n      bindSource: true\n"+
		"events:\n  stats: {interval: 1s}\n"+
		"leaseHTTP:\n  crawlers:\n    - name: crawler-7\n      tokenSHA256: "+hex.EncodeToString(sum[:])+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gwA := freeAddr(t)
	n := startNode(t, dir, "--config", cfg, "--gateway-listen", gwA, "--gateway-lease-ttl", gwLeaseTTL.String(), "--gateway-idle-release", "2s")
	hc := poolHealth
	names := []string{"gw-1", "gw-2", "gw-3", "gw-4"}
	for _, name := range names {
		n.nats("kv", "put", "proxies", name, `{"provider":"local","maxLeases":4,"attributes":{"geo":"de"},"auth":{"username":"fleet","password":"`+gwFleetToken+`"},`+hc+`}`)
	}
	// One proxy more, elsewhere (geo fr), with lease-bound credentials: only a lease's own
	// token passes it, so a page through it shows the gateway chains with the lease's token.
	n.nats("kv", "put", "proxies", "gw-lease", `{"provider":"local","maxLeases":4,"attributes":{"geo":"fr"},"auth":{"mode":"lease"},`+hc+`}`)
	rows := n.waitRows("the fleet Ready", time.Minute, allPhase(append(names, "gw-lease"), events.PhaseReady))
	proxyOf := map[string]string{}
	for _, name := range append(names, "gw-lease") {
		host, _, _ := net.SplitHostPort(rows[name].Address)
		proxyOf[host] = name
	}
	files, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(files.CA)
	ca := x509.NewCertPool()
	ca.AppendCertsFromPEM(pem)
	plain := startGwOrigin(t, gwNet+"1:0", nil)
	secure := startGwOrigin(t, "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	throughFleet := func(t *testing.T, o *gwOrigin, from int) {
		t.Helper()
		seen := o.sources()[from:]
		if len(seen) == 0 {
			t.Fatalf("%s was not reached", o.url)
		}
		for _, s := range seen {
			if proxyOf[s] == "" {
				t.Errorf("%s was reached from %s, not through a fleet proxy", o.url, s)
			}
		}
	}
	proxyURL := "http://crawler-7-geo-de:" + token + "@" + gwA

	t.Run("curl, Go, Python requests and Scrapy, plain and HTTPS", func(t *testing.T) {
		gwClientsFetch(t, proxyURL, files.CA, ca, plain, secure, throughFleet)
	})
	t.Run("through a proxy with lease-bound credentials", func(t *testing.T) {
		for _, o := range []*gwOrigin{plain, secure} {
			from := len(o.sources())
			out, err := exec.Command("curl", "-s", "--fail", "--max-time", "20", "--cacert", files.CA, "-x", "http://crawler-7-geo-fr:"+token+"@"+gwA, o.url+"/lease").CombinedOutput()
			if err != nil || len(o.sources()) != from+1 || proxyOf[o.sources()[from]] != "gw-lease" {
				t.Errorf("curl %s through gw-lease: %v %s (sources %v)", o.url, err, out, o.sources()[from:])
			}
		}
	})
	t.Run("a wrong token is 407, a bad key named", func(t *testing.T) {
		out, _ := exec.Command("curl", "-s", "-w", "\n%{http_code}", "-x", "http://crawler-7:wrong@"+gwA, plain.url).Output()
		if !strings.HasSuffix(string(out), "\n407") || !strings.Contains(string(out), "not a known crawler token") {
			t.Errorf("wrong token: %s", out)
		}
		out, _ = exec.Command("curl", "-s", "-w", "\n%{http_code}", "-x", "http://crawler-7-zone-x:"+token+"@"+gwA, plain.url).Output()
		if !strings.HasSuffix(string(out), "\n400") || !strings.Contains(string(out), `"zone": unknown key`) {
			t.Errorf("bad key: %s", out)
		}
	})
	t.Run("100 session-less requests spread over the fleet", func(t *testing.T) {
		from := len(plain.sources())
		c := gwClient(t, gwA, "crawler-7-geo-de", token, ca)
		for range 100 {
			if code, body := gwGet(t, c, plain.url); code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
		}
		per := map[string]int{}
		for _, s := range plain.sources()[from:] {
			per[proxyOf[s]]++
		}
		for _, name := range names {
			if per[name] < 10 {
				t.Errorf("%s carried %d of 100 requests: %v", name, per[name], per)
			}
		}
	})
	gwB := freeAddr(t)
	g := startGatewayProcess(t, n, cfg, gwB)
	t.Run("a session stays on its proxy across two replicas and a restart", func(t *testing.T) {
		from := len(plain.sources())
		for i := range 12 {
			gw := gwA
			if i%2 == 1 {
				gw = gwB
			}
			if i == 6 {
				g.stop()
				g.start()
			}
			if code, body := gwGet(t, gwClient(t, gw, "crawler-7-geo-de-session-e2e1-ttl-600", token, ca), plain.url); code != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, code, body)
			}
		}
		seen := plain.sources()[from:]
		for _, s := range seen {
			if s != seen[0] {
				t.Fatalf("the session moved: %v", seen)
			}
		}
	})
	t.Run("a 429 is reported blocked and the next request goes elsewhere", func(t *testing.T) {
		gwBlock(t, n, gwClient(t, gwA, "crawler-7-geo-de", token, ca), plain, proxyOf)
	})
	t.Run("a reload lets a new token in and the old one out", func(t *testing.T) {
		next := "egt_" + hex.EncodeToString([]byte("gateway-e2e-token-2"))
		sum2 := leaser.TokenHash(next)
		b, _ := os.ReadFile(cfg)
		old := "tokenSHA256: " + hex.EncodeToString(sum[:])
		if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), old, "tokenSHA256: "+hex.EncodeToString(sum2[:]), 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = n.cmd.Process.Signal(syscall.SIGHUP)
		waitUntil(t, "the new token let in", 15*time.Second, func() (bool, string) {
			out, _ := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-x", "http://crawler-7:"+next+"@"+gwA, plain.url).Output()
			return string(out) == "200", string(out)
		})
		if out, _ := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-x", proxyURL, plain.url).Output(); string(out) != "407" {
			t.Errorf("the removed token got %s, want 407", out)
		}
	})
	t.Run("kill -9 of a gateway leaves no lease past its TTL", func(t *testing.T) {
		gwKill(t, n, g, gwClient(t, gwB, "crawler-7-geo-de-session-k9", token, ca), plain)
	})
	t.Run("the fleet's password is in no log, answer or metric", func(t *testing.T) {
		out, _ := exec.Command("curl", "-s", "-i", "-x", proxyURL, "http://"+gwNet+"1:1/").Output()
		m := regexp.MustCompile(`msg="serving /metrics and /healthz".*? url=(\S+)`).FindStringSubmatch(n.logs())
		if m == nil {
			t.Fatal("no metrics address in the log")
		}
		metrics := httpGet(t, m[1]+"/metrics")
		if !strings.Contains(metrics, `egress_gateway_requests_total{holder="crawler-7",kind="http",pool="",result="ok"}`) ||
			!strings.Contains(metrics, `egress_gateway_blocks_total{holder="crawler-7",pool="",result="blocked"} 1`) {
			t.Errorf("the gateway's metrics:\n%s", metrics)
		}
		for what, s := range map[string]string{"egressd run's log": n.logs(), "the gateway's log": g.logs(), "an answer": string(out), "the metrics": metrics} {
			if strings.Contains(s, gwFleetToken) {
				t.Errorf("%s carries the fleet's password", what)
			}
		}
	})
}

// gwClientsFetch fetches both origins with every client, checking each went through the fleet.
func gwClientsFetch(t *testing.T, proxyURL, caFile string, ca *x509.CertPool, plain, secure *gwOrigin, throughFleet func(*testing.T, *gwOrigin, int)) {
	for _, o := range []*gwOrigin{plain, secure} {
		from := len(o.sources())
		out, err := exec.Command("curl", "-s", "--fail", "--max-time", "20", "--cacert", caFile, "-x", proxyURL, o.url+"/curl").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "hello "+gwNet) {
			t.Errorf("curl %s: %v %s", o.url, err, out)
		}
		u, _ := url.Parse(proxyURL)
		pass, _ := u.User.Password()
		if code, body := gwGet(t, gwClient(t, u.Host, u.User.Username(), pass, ca), o.url+"/go"); code != http.StatusOK || !strings.Contains(body, "hello "+gwNet) {
			t.Errorf("Go %s: %d %s", o.url, code, body)
		}
		py := fmt.Sprintf("import requests\nr = requests.get(%q, proxies={'http': %q, 'https': %q}, verify=%q, timeout=20)\nr.raise_for_status()\nprint(r.text)\n",
			o.url+"/requests", proxyURL, proxyURL, caFile)
		if out, err := exec.Command("/usr/bin/python3", "-c", py).CombinedOutput(); err != nil || !strings.Contains(string(out), "hello "+gwNet) {
			t.Errorf("python requests %s: %v %s", o.url, err, out)
		}
		if undici := undiciDir(t); undici != "" {
			if out, err := exec.Command("node", filepath.Join(undici, "fetch.mjs"), o.url+"/undici", proxyURL, caFile).CombinedOutput(); err != nil || !strings.Contains(string(out), "200 <html><title>hello "+gwNet) {
				t.Errorf("undici %s: %v %s", o.url, err, out)
			}
		}
		throughFleet(t, o, from)
	}
	if exec.Command("/usr/bin/python3", "-c", "import scrapy").Run() != nil {
		t.Log("SKIPPED Scrapy: not installed for /usr/bin/python3")
		return
	}
	spider := filepath.Join(t.TempDir(), "spider.py")
	src := "import scrapy\nclass S(scrapy.Spider):\n    name = 's'\n    start_urls = [" + fmt.Sprintf("%q, %q", plain.url+"/scrapy", secure.url+"/scrapy") +
		"]\n    def parse(self, response):\n        yield {'url': response.url, 'title': response.css('title::text').get()}\n"
	if err := os.WriteFile(spider, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	from := [2]int{len(plain.sources()), len(secure.sources())}
	// Settings only: Scrapy's own HttpProxyMiddleware reads the proxy from the environment.
	out := runTool(t, filepath.Dir(spider), []string{"http_proxy=" + proxyURL, "https_proxy=" + proxyURL},
		"/usr/bin/python3", "-m", "scrapy", "runspider", spider, "-s", "LOG_LEVEL=INFO", "-o", "-:jsonlines")
	if strings.Count(out, `"title": "hello `+gwNet) != 2 {
		t.Errorf("scrapy through the gateway:\n%s", out)
	}
	throughFleet(t, plain, from[0])
	throughFleet(t, secure, from[1])
}

// gwBlock: one proxy's source gets 429s; the gateway reports it blocked for the target, the
// crawler gets its page through another proxy, later requests avoid the blocked one, and the
// lease statistics count the block.
func gwBlock(t *testing.T, n *node, c *http.Client, o *gwOrigin, proxyOf map[string]string) {
	if code, _ := gwGet(t, c, o.url); code != http.StatusOK {
		t.Fatal(code)
	}
	all := o.sources()
	victim := all[len(all)-1]
	o.blockSource(victim)
	from := len(all)
	for range 8 {
		if code, body := gwGet(t, c, o.url); code != http.StatusOK {
			t.Fatalf("not retried past the block: %d %s", code, body)
		}
	}
	seen := o.sources()[from:]
	hit := -1
	for i, s := range seen {
		if s == victim {
			if hit >= 0 {
				t.Errorf("a request went through the blocked proxy %s again: %v", proxyOf[victim], seen)
			}
			hit = i
		}
	}
	if hit < 0 {
		t.Fatalf("the blocked proxy was never tried: %v", seen)
	}
	target, _, _ := net.SplitHostPort(strings.TrimPrefix(o.url, "http://"))
	_, js := n.client()
	waitUntil(t, "the blocked report", 15*time.Second, func() (bool, string) {
		for _, ev := range reports(t, js) {
			if ev.Reason == events.Reason(events.ReportBlocked) && ev.Lease != nil && ev.Lease.Holder == "crawler-7" && ev.Lease.Target == target && ev.Proxy == proxyOf[victim] {
				return true, ""
			}
		}
		return false, "no blocked report for " + target + " on " + proxyOf[victim]
	})
	waitUntil(t, "the statistics to count the block", 15*time.Second, func() (bool, string) {
		out := n.egressd("stats", "--by", "proxy")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 4 && f[0] == proxyOf[victim] && f[3] != "0" {
				return true, ""
			}
		}
		return false, out
	})
}

// gwKill: a gateway holding a session's lease is killed with -9; the lease runs out at its
// TTL, counted from KV.
func gwKill(t *testing.T, n *node, g *node, c *http.Client, o *gwOrigin) {
	if code, body := gwGet(t, c, o.url); code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	_, js := n.client()
	store, err := kvstore.Bind(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	held := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h, err := store.Leases.Held(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, c := range h {
			total += c
		}
		return total
	}
	if held() == 0 {
		t.Fatal("the gateway holds no lease to leave behind")
	}
	g.kill9()
	killed := time.Now()
	// Every lease (egressd run's gateway gives its idle ones back after 2s) is gone by the TTL.
	waitUntil(t, "no lease held", gwLeaseTTL+20*time.Second, func() (bool, string) {
		h := held()
		return h == 0, fmt.Sprintf("%d held %s after the kill", h, time.Since(killed).Round(time.Second))
	})
}

// undiciDir is testdata/undici with its packages installed (npm ci there; .ci/run does), or ""
// when they are not: then the test says so, and fails where the integrations are required.
func undiciDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("testdata/undici")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "node_modules/undici")); err == nil {
		if _, err := exec.LookPath("node"); err == nil {
			return d
		}
	}
	if os.Getenv(integrationsEnvVar) == "required" {
		t.Fatalf("%s=required, and undici is missing: npm ci in cmd/egressd/e2e/testdata/undici (.ci/run does)", integrationsEnvVar)
	}
	t.Log("SKIPPED undici: npm ci in cmd/egressd/e2e/testdata/undici")
	return ""
}
