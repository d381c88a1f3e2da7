package statuspage

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Sentinels planted in specs: user-data and passwords the page must never show.
const (
	sentinelUserData = "SENTINEL-USERDATA-5b2e"
	sentinelPassword = "SENTINEL-PASSWORD-c41f"
)

// rig is an embedded NATS server with egressd's buckets and stream declared.
type rig struct {
	srv   *server.Server
	nc    *nats.Conn
	store *kvstore.Store
	now   time.Time
	live  bool // the page reads the real clock: see newLiveRig
}

// fixedNow is the fixture's clock: noon UTC, so that every event of the fixture (the oldest
// is two hours old) falls on the same day whatever the time zone and the hour the tests run.
var fixedNow = time.Date(2026, time.March, 4, 12, 0, 0, 0, time.UTC)

// newRig is a rig on the fixed clock: the page and the fixture agree on fixedNow.
func newRig(t *testing.T) *rig {
	t.Helper()
	r := startRig(t)
	r.now = fixedNow
	return r
}

// newLiveRig is a rig on the real clock, for tests of the lease statistics: a window of them
// is read by the stream's storage times, which only the server's clock sets. Those tests
// assert nothing that depends on the date, the hour or the time zone.
func newLiveRig(t *testing.T) *rig {
	t.Helper()
	r := startRig(t)
	r.now, r.live = time.Now(), true
	return r
}

func startRig(t *testing.T) *rig {
	t.Helper()
	srv, nc, js := kvstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{srv: srv, nc: nc, store: store}
}

func (r *rig) put(t *testing.T, kv jetstream.KeyValue, key string, v any) {
	t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(context.Background(), key, b); err != nil {
		t.Fatalf("put %s/%s: %v", kv.Bucket(), key, err)
	}
}

func (r *rig) publish(t *testing.T, ev events.Event) {
	t.Helper()
	ev.V = 1
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.JS.Publish(context.Background(), events.EventSubject(ev.Kind, ev.Proxy), b); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// handler is a page over the rig with cfg's Store filled in.
func (r *rig) handler(t *testing.T, cfg Config) http.Handler {
	t.Helper()
	cfg.Store = r.store
	if cfg.Now == nil && !r.live {
		cfg.Now = func() time.Time { return r.now }
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p.Handler()
}

// seedFleet writes what a small installation would hold: proxies in most phases, health
// verdicts, leases, provider checks and a history of events.
func (r *rig) seedFleet(t *testing.T) {
	t.Helper()
	ago := func(d time.Duration) time.Time { return r.now.Add(-d) }
	specs := map[string]string{
		"crawl-eu-1": `{"provider":"local","maxLeases":2,"attributes":{"region":"eu","pool":"crawl"},"pool":"crawl",` +
			`"cloudInit":"#cloud-config\nruncmd: [echo ` + sentinelUserData + `]",` +
			`"auth":{"username":"crawler","password":"` + sentinelPassword + `"}}`,
		"crawl-eu-2": `{"provider":"local","maxLeases":2,"attributes":{"region":"eu"},"pool":"crawl"}`,
		"crawl-us-1": `{"provider":"kvm-home","attributes":{"region":"us"}}`,
		"ext-office": `{"mode":"external","endpoint":{"host":"203.0.113.7","port":8080},"maxLeases":4,` +
			`"auth":{"username":"office","password":"` + sentinelPassword + `"}}`,
		"bad-spec":   `{"provider":"nosuch"}`,
		"broken-1":   `{"provider":"kvm-home","cloudInit":"` + sentinelUserData + `"}`,
		"crawl-eu-3": `{"provider":"local","maxLeases":3}`,
	}
	for name, spec := range specs {
		r.put(t, r.store.Proxies, name, []byte(spec))
	}
	statuses := map[string]events.ProxyStatus{
		"crawl-eu-1": {Phase: events.PhaseReady, Mode: schemas.ModeManaged, Provider: "local", Host: "local", IP: "127.0.0.2", Port: 3128,
			CreatedAt: ago(2 * time.Hour), ReadyAt: ago(119 * time.Minute)},
		"crawl-eu-2": {Phase: events.PhaseUnhealthy, Mode: schemas.ModeManaged, Provider: "local", Host: "local", IP: "127.0.0.3", Port: 3128,
			Reason: events.ReasonProbeFailing, Message: "CONNECT example.com:443: connection refused", CreatedAt: ago(90 * time.Minute)},
		"crawl-us-1": {Phase: events.PhaseProvisioning, Mode: schemas.ModeManaged, Provider: "kvm-home", Host: "hv1", Reason: events.ReasonCreating,
			CreatedAt: ago(40 * time.Second)},
		"ext-office": {Phase: events.PhaseReady, Mode: schemas.ModeExternal, Provider: "external", IP: "203.0.113.7", Port: 8080,
			Reason: events.ReasonExternalEndpoint, CreatedAt: ago(72 * time.Hour)},
		"bad-spec": {Phase: events.PhaseInvalid, Reason: events.ReasonUnknownProvider,
			Message: `provider "nosuch" is not configured (known: kvm-home, local)`, CreatedAt: ago(5 * time.Minute)},
		"broken-1": {Phase: events.PhaseFailed, Mode: schemas.ModeManaged, Provider: "kvm-home", Host: "hv2", Reason: events.ReasonPermanent,
			Message:   "create failed: kvm-home create: permanent error: storage pool default is full",
			LastError: &events.LastError{Class: events.ClassPermanent, Message: "storage pool default is full", At: ago(3 * time.Minute)},
			CreatedAt: ago(20 * time.Minute)},
	}
	for name, st := range statuses {
		st.V = 1
		r.put(t, r.store.Status, name, st)
	}
	health := []events.ProxyHealth{
		{Proxy: "crawl-eu-1", Address: "127.0.0.2:3128", Healthy: true, ConsecutiveSuccesses: 12, SuccessThreshold: 1, FailureThreshold: 3, LatencyMs: 4.2, LastProbeAt: ago(10 * time.Second),
			Anonymity: events.AnonymityElite},
		{Proxy: "crawl-eu-2", Address: "127.0.0.3:3128", ConsecutiveFailures: 3, SuccessThreshold: 1, FailureThreshold: 3, LastError: "connection refused", LastProbeAt: ago(10 * time.Second),
			Anonymity: events.AnonymityTransparent, LeakedHeaders: []string{"Via", "X-Forwarded-For"}},
		{Proxy: "ext-office", Address: "203.0.113.7:8080", Healthy: true, ConsecutiveSuccesses: 3, SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: ago(20 * time.Second)},
		// A verdict about an address crawl-us-1 no longer has: not its health now.
		{Proxy: "crawl-us-1", Address: "192.0.2.50:3128", Healthy: true, ConsecutiveSuccesses: 3, SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: ago(time.Hour)},
	}
	for _, h := range health {
		h.V = 1
		r.put(t, r.store.Health, h.Proxy, h)
	}
	for _, key := range []string{"crawl-eu-1.0", "crawl-eu-1.1", "ext-office.0"} {
		proxy, _, _ := strings.Cut(key, ".")
		r.put(t, r.store.Leases.Of(proxy), key, events.Lease{V: 1, Proxy: proxy, Token: "t", TTLSeconds: 300, Holder: "crawler-7",
			AcquiredAt: ago(time.Minute), ExpiresAt: r.now.Add(4 * time.Minute)})
	}
	// Cooldowns: ext-office for every target after a failed report, crawl-eu-1 for one target
	// after a blocked one; the third ended a minute ago (it only waits for its TTL).
	for _, c := range []events.Cooldown{
		{Proxy: "ext-office", Result: events.ReportFailed, Holder: "crawler-7", Until: r.now.Add(4 * time.Minute)},
		{Proxy: "crawl-eu-1", Target: "shop.example", Result: events.ReportBlocked, Holder: "crawler-7", Until: r.now.Add(9 * time.Minute), Strikes: 2},
		{Proxy: "crawl-eu-2", Target: "news.example", Result: events.ReportBlocked, Until: r.now.Add(-time.Minute)},
	} {
		c.V = 1
		r.put(t, r.store.Cooldowns, cooldownKey(c.Proxy, c.Target), c)
	}
	// The leasers' count of crawl-eu-1's blocks on shop.example (escalating cooldowns): not a
	// cooldown of its own.
	r.put(t, r.store.Cooldowns, cooldownKey("crawl-eu-1", "shop.example")+".strikes",
		events.Strikes{V: 1, Proxy: "crawl-eu-1", Target: "shop.example", Count: 2, LastAt: ago(time.Minute)})
	targets := []events.TargetHealth{
		{Provider: "local", Target: "local", Order: 0, Ready: true, Reason: "Ready", LatencyMs: 0.4, CheckedAt: ago(15 * time.Second), LastTransitionTime: ago(3 * time.Hour)},
		{Provider: "kvm-home", Target: "hv2", Order: 1, Ready: false, Reason: "Unreachable", Message: "dial tcp 192.0.2.10:22: i/o timeout",
			LatencyMs: 15000, CheckedAt: ago(30 * time.Second), LastTransitionTime: ago(25 * time.Minute)},
		{Provider: "kvm-home", Target: "hv1", Order: 0, Ready: true, Reason: "Ready", LatencyMs: 38.6, CheckedAt: ago(30 * time.Second), LastTransitionTime: ago(26 * time.Hour)},
	}
	for _, th := range targets {
		th.V = 1
		r.put(t, r.store.Providers, th.Provider+"."+th.Target, th)
	}
	// Pools: crawl owns crawl-eu-1 and crawl-eu-2 (one Unhealthy: Degraded); batch is declared
	// but not acted on yet. Their templates hold the sentinels too.
	template := `{"provider":"local","maxLeases":2,"cloudInit":"` + sentinelUserData + `","auth":{"username":"u","password":"` + sentinelPassword + `"}}`
	r.put(t, r.store.Pools, "crawl", []byte(`{"replicas":2,"rotation":{"maxAgeSeconds":21600},"template":`+template+`}`))
	r.put(t, r.store.Pools, "batch", []byte(`{"replicas":4,"template":`+template+`}`))
	r.put(t, r.store.PoolStatus, "crawl", events.PoolStatus{V: 1, Phase: events.PoolDegraded, Message: "1 of 2 members Ready",
		Replicas: 2, MaxMembers: 3, Members: []events.PoolMember{
			{Name: "crawl-eu-1", CreatedAt: ago(2 * time.Hour), RotateAt: r.now.Add(4 * time.Hour)},
			{Name: "crawl-eu-2", CreatedAt: ago(90 * time.Minute), RotateAt: r.now.Add(270 * time.Minute)}},
		NextRotation: r.now.Add(4*time.Hour + 30*time.Minute), UpdatedAt: ago(time.Minute)})
	// A provisioner's poll of crawl-eu-1: routine, so the page's recent events leave it out.
	get := events.OpResult{V: 1, Kind: events.OpGet, Proxy: "crawl-eu-1", Provider: "local", Host: "local", Attempt: 1, Final: true,
		Instance: &events.Instance{State: "Running", Address: "127.0.0.2", Port: 3128}}
	res := events.OpResult{V: 1, Kind: events.OpCreate, Proxy: "crawl-eu-1", Provider: "local", Host: "local", Attempt: 1, Final: true,
		Instance: &events.Instance{State: "Running", Address: "127.0.0.2", Port: 3128}}
	for _, ev := range []events.Event{
		{Kind: events.KindPhase, Proxy: "crawl-eu-1", At: ago(2 * time.Hour), From: events.PhasePending, Phase: events.PhaseProvisioning, Reason: events.ReasonCreating},
		{Kind: events.KindOpResult, Proxy: "crawl-eu-1", At: ago(119*time.Minute + 30*time.Second), Op: &res},
		{Kind: events.KindPhase, Proxy: "crawl-eu-1", At: ago(119 * time.Minute), From: events.PhaseRunning, Phase: events.PhaseReady},
		{Kind: events.KindProvider, Proxy: "kvm-home", At: ago(25 * time.Minute), Reason: "Unreachable", Message: "dial tcp 192.0.2.10:22: i/o timeout",
			Target: &events.TargetHealth{Provider: "kvm-home", Target: "hv2", Reason: "Unreachable"}},
		{Kind: events.KindPhase, Phase: events.PhaseInvalid, Proxy: "bad-spec", At: ago(5 * time.Minute), Reason: events.ReasonUnknownProvider, Message: `provider "nosuch" is not configured`},
		{Kind: events.KindHealth, Proxy: "crawl-eu-2", At: ago(2 * time.Minute), Reason: events.ReasonUnhealthy, Message: "connection refused",
			Health: &events.ProxyHealth{Address: "127.0.0.3:3128"}},
		{Kind: events.KindLease, Proxy: "crawl-eu-1", At: ago(time.Minute), Reason: events.ReasonGranted,
			Lease: &events.LeaseEvent{ID: "crawl-eu-1.1.k3j9", Holder: "crawler-7", Target: "shop.example"}},
		{Kind: events.KindOpResult, Proxy: "crawl-eu-1", At: ago(50 * time.Second), Op: &get},
		{Kind: events.KindPhase, Proxy: "crawl-us-1", At: ago(40 * time.Second), From: events.PhasePending, Phase: events.PhaseProvisioning, Reason: events.ReasonCreating},
	} {
		r.publish(t, ev)
	}
}

// cooldownKey is the key of a cooldown in proxy_cooldowns, as the leasers write it.
func cooldownKey(proxy, target string) string {
	if target == "" {
		return proxy
	}
	return proxy + "." + base64.RawURLEncoding.EncodeToString([]byte(target))
}

// get fetches path from h.
func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

var (
	styleRe = regexp.MustCompile(`(?s)<(style|title|head)\b.*?</(style|title|head)>`)
	tagRe   = regexp.MustCompile(`(?s)<[^>]*>`)
	spaceRe = regexp.MustCompile(`\s+`)
)

// visibleText is roughly what a person reads on the page: the body's text without tags,
// entities decoded, whitespace collapsed.
func visibleText(doc string) string {
	doc = styleRe.ReplaceAllString(doc, " ")
	doc = tagRe.ReplaceAllString(doc, " ")
	return strings.TrimSpace(spaceRe.ReplaceAllString(html.UnescapeString(doc), " "))
}

// tableRows returns the visible text of each body row of the table with the given id.
func tableRows(t *testing.T, doc, id string) []string {
	t.Helper()
	start := strings.Index(doc, `<table id="`+id+`"`)
	if start < 0 {
		t.Fatalf("no table %q in the page", id)
	}
	doc = doc[start:]
	doc = doc[:strings.Index(doc, "</table>")]
	body := doc[strings.Index(doc, "<tbody"):]
	var rows []string
	for _, tr := range strings.Split(body, "<tr")[1:] {
		rows = append(rows, visibleText("<tr"+tr))
	}
	return rows
}

// rowOf is the row of tableRows whose text starts with first.
func rowOf(t *testing.T, rows []string, first string) string {
	t.Helper()
	for _, r := range rows {
		if r == first || strings.HasPrefix(r, first+" ") {
			return r
		}
	}
	t.Fatalf("no row starting with %q in:\n%s", first, strings.Join(rows, "\n"))
	return ""
}
