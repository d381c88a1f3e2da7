package statuspage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
)

// Defaults of Config.
const (
	DefaultRefresh      = 5 * time.Second
	DefaultRecentEvents = 50
	DefaultTimeout      = 3 * time.Second
	DefaultTitle        = "egressd status"
)

// maxRecentEvents bounds RecentEvents: the page reads that many messages per request.
const maxRecentEvents = 1000

// Config configures a Page.
type Config struct {
	Store        *kvstore.Store
	Log          *slog.Logger
	Refresh      time.Duration // how often the browser reloads the page; default 5 s
	RecentEvents int           // how many of the latest events to show; default 50
	Title        string        // default "egressd status"
	Timeout      time.Duration // bound on the NATS reads of one request; default 3 s
	// Now is the page's clock, default time.Now: every age, "next in" and the date shown
	// beside an event of another day are reckoned from it, in its time zone.
	Now func() time.Time
}

// Page renders the status page. It holds no state between requests.
type Page struct {
	cfg Config
}

// New checks cfg and applies its defaults.
func New(cfg Config) (*Page, error) {
	if cfg.Store == nil {
		return nil, errors.New("statuspage: Config.Store is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.RecentEvents <= 0 {
		cfg.RecentEvents = DefaultRecentEvents
	}
	cfg.RecentEvents = min(cfg.RecentEvents, maxRecentEvents)
	if cfg.Title == "" {
		cfg.Title = DefaultTitle
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Page{cfg: cfg}, nil
}

// Handler serves the page at "/", its data at "/api/status.json", the lease statistics at
// "/api/stats.json" and the held leases by holder at "/api/leases.json". All are read-only:
// only GET and HEAD are routed.
func (p *Page) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.serveHTML)
	mux.HandleFunc("GET /api/status.json", p.serveJSON)
	mux.HandleFunc("GET /api/stats.json", p.serveStats)
	mux.HandleFunc("GET /api/leases.json", p.serveLeases)
	return mux
}

// snapshot reads the state for one request, bounded by the configured timeout; with stats,
// also the lease statistics of the page's chart, which /api/status.json does not carry.
func (p *Page) snapshot(r *http.Request, q query, stats bool) Snapshot {
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.Timeout)
	defer cancel()
	s := load(ctx, p.cfg, q, stats, p.cfg.Now())
	for _, e := range s.Errors {
		p.cfg.Log.Warn("status page: read failed", "err", e)
	}
	return s
}

func (p *Page) serveHTML(w http.ResponseWriter, r *http.Request) {
	q, qerr := parseQuery(r.URL.Query())
	s := p.snapshot(r, q, true)
	v := newView(s)
	code := statusCode(s)
	if qerr != nil {
		// The page still renders, with the form holding what was asked so it can be fixed.
		v.FilterError, code = qerr.Error(), http.StatusBadRequest
		v.Proxies = nil
	}
	// Rendered into a buffer first, so a template error is a clean 500, not half a page.
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, v); err != nil {
		p.cfg.Log.Error("status page: render failed", "err", err)
		http.Error(w, "status page: render failed", http.StatusInternalServerError)
		return
	}
	setHeaders(w, "text/html; charset=utf-8")
	// Even with the banner shown, a monitor polling the page should see the failure.
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r.URL.Query())
	if err != nil {
		writeJSON(w, p.cfg.Log, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s := p.snapshot(r, q, false)
	writeJSON(w, p.cfg.Log, statusCode(s), s)
}

// serveStats is `egressd stats --json` over HTTP: the same read model, the same query (since,
// by, sort, top, target, proxy, provider, pool, and step for the series).
func (p *Page) serveStats(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q, err := fleet.ParseStatsQuery(fleet.StatsInput{Since: v.Get("since"), By: v.Get("by"), Sort: v.Get("sort"), Top: v.Get("top"),
		Step: v.Get("step"), Targets: v["target"], Proxies: v["proxy"], Providers: v["provider"], Pools: v["pool"]})
	if err != nil {
		writeJSON(w, p.cfg.Log, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.Timeout)
	defer cancel()
	st, err := fleet.LoadStats(ctx, p.cfg.Store.JS, q, p.cfg.Now())
	if err != nil {
		p.cfg.Log.Warn("status page: read failed", "err", err)
		writeJSON(w, p.cfg.Log, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, p.cfg.Log, http.StatusOK, st)
}

// serveLeases answers fleet.LoadLeases: every held lease and the sums by holder; with
// ?holder=h, only that holder's leases (and its row). A shard that cannot be read is a 503
// with what could be read, like the page.
func (p *Page) serveLeases(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.Timeout)
	defer cancel()
	l := fleet.LoadLeases(ctx, p.cfg.Store.Leases, p.cfg.Now())
	if q := r.URL.Query(); q.Has("holder") {
		h := q.Get("holder")
		l.Rows = l.Of(h)
		l.Holders = slices.DeleteFunc(l.Holders, func(r fleet.HolderRow) bool { return r.Holder != h })
	}
	code, errs := http.StatusOK, []string{}
	for _, e := range l.Errors {
		p.cfg.Log.Warn("status page: read failed", "err", e)
		code, errs = http.StatusServiceUnavailable, append(errs, e.Error())
	}
	writeJSON(w, p.cfg.Log, code, struct {
		*fleet.Leases
		Errors []string `json:"errors"`
	}{l, errs})
}

func writeJSON(w http.ResponseWriter, log *slog.Logger, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		log.Error("status page: encode failed", "err", err)
		http.Error(w, "status page: encode failed", http.StatusInternalServerError)
		return
	}
	setHeaders(w, "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func statusCode(s Snapshot) int {
	if len(s.Errors) > 0 {
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

// setHeaders makes the page inert beyond its own inline CSS and its filter form (a GET to the
// page itself): no script may run and nothing may be loaded, so even an escaping mistake
// could not execute a hostile proxy message.
func setHeaders(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}
