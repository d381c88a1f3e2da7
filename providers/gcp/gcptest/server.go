package gcptest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// selfLinkBase is what real selfLinks start with, whatever endpoint the client used.
const selfLinkBase = "https://www.googleapis.com/compute/v1/"

// Options configures a simulator.
type Options struct {
	Project   string       // the only project served; others answer 404
	Zones     []string     // zones served, e.g. "us-central1-a"
	Addresses []netip.Addr // loopback pool: one per instance, its natIP and networkIP
	ProxyPort int          // port every instance's forward proxy listens on, unless Boot
	Serve     ServeFunc    // runs each RUNNING instance's proxy: forwardproxy.Serve, wrapped
	// Boot, when set, replaces ProxyPort and Serve: it reads a RUNNING instance's metadata as a
	// real image's startup would and says which port its proxy listens on and how it serves
	// (port and auth as the provider delivered them). An error leaves the instance RUNNING
	// with nothing listening, as a VM whose proxy did not start.
	Boot BootFunc
	// Auth, when set, makes the API require its access token and serves the OAuth token
	// endpoint (TokenPath) that issues it for a service-account JWT signed with its key.
	Auth   *Auth
	Logger *slog.Logger     // nil discards
	Delays Delays           // asynchronous transitions; zero values are immediate
	Now    func() time.Time // nil: time.Now; only for timestamps
}

// Delays are the asynchronous steps of an insert (and delete):
// operation PENDING → RUNNING after Pending, instance PROVISIONING → STAGING after
// Provisioning, STAGING → RUNNING after Staging (when the insert operation turns DONE).
// A delete's operation is DONE, and the instance gone, after Pending + Stopping.
type Delays struct {
	Pending      time.Duration
	Provisioning time.Duration
	Staging      time.Duration
	Stopping     time.Duration
}

// Server is a running simulator. Close stops every forward proxy and transition.
type Server struct {
	opts Options
	http *httptest.Server
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup // transitions and proxies

	mu          sync.Mutex
	nextID      uint64
	zones       map[string]*zoneState
	firewalls   map[string]*computepb.Firewall
	globalOps   map[string]*operation
	requestIDs  map[string]*operation // insert requestId → its operation
	free        []netip.Addr
	insertFault map[string][]Fault // zone → faults for the next inserts, in order
	burst429    int
	insertCalls int
	inserted    int // instances made: inserts that were not requestId replays or refused
	token       string
	issued      int

	unreachableShape UnreachableShape // how aggregatedList reports an unreachable zone
}

type zoneState struct {
	name        string
	instances   map[string]*instance
	ops         map[string]*operation
	unreachable bool
}

// New starts a simulator. The zones, project and port are required.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Project == "":
		return nil, errors.New("gcptest: Options.Project is empty")
	case len(opts.Zones) == 0:
		return nil, errors.New("gcptest: Options.Zones is empty")
	case opts.Boot == nil && (opts.ProxyPort <= 0 || opts.ProxyPort > 65535):
		return nil, fmt.Errorf("gcptest: Options.ProxyPort %d is not a port", opts.ProxyPort)
	case opts.Boot == nil && opts.Serve == nil:
		return nil, errors.New("gcptest: Options.Serve and Options.Boot are nil")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{
		opts:        opts,
		ctx:         ctx,
		stop:        stop,
		nextID:      1000000000000000000,
		zones:       make(map[string]*zoneState),
		firewalls:   make(map[string]*computepb.Firewall),
		globalOps:   make(map[string]*operation),
		requestIDs:  make(map[string]*operation),
		free:        append([]netip.Addr(nil), opts.Addresses...),
		insertFault: make(map[string][]Fault),
	}
	if opts.Auth != nil {
		s.token = opts.Auth.Token
	}
	for _, z := range opts.Zones {
		s.zones[z] = &zoneState{name: z, instances: map[string]*instance{}, ops: map[string]*operation{}}
	}
	s.http = httptest.NewServer(s.routes())
	return s, nil
}

// URL is the endpoint to hand the client (option.WithEndpoint).
func (s *Server) URL() string { return s.http.URL }

// Close stops the HTTP server, every pending transition and every forward proxy, and waits
// for them.
func (s *Server) Close() {
	// Cancel first: an operations wait in flight returns at once, so Close does not block.
	s.stop()
	s.http.Close()
	s.wg.Wait()
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	const p = "/compute/v1/projects/{project}"
	mux.HandleFunc("POST "+p+"/zones/{zone}/instances", s.insertInstance)
	mux.HandleFunc("GET "+p+"/zones/{zone}/instances/{name}", s.getInstance)
	mux.HandleFunc("DELETE "+p+"/zones/{zone}/instances/{name}", s.deleteInstance)
	mux.HandleFunc("GET "+p+"/aggregated/instances", s.aggregatedList)
	mux.HandleFunc("GET "+p+"/zones/{zone}/operations", s.listZoneOperations)
	mux.HandleFunc("GET "+p+"/zones/{zone}/operations/{op}", s.getZoneOperation)
	mux.HandleFunc("POST "+p+"/zones/{zone}/operations/{op}/wait", s.waitZoneOperation)
	mux.HandleFunc("DELETE "+p+"/zones/{zone}/operations/{op}", s.deleteZoneOperation)
	mux.HandleFunc("POST "+p+"/global/firewalls", s.insertFirewall)
	mux.HandleFunc("GET "+p+"/global/firewalls", s.listFirewalls)
	mux.HandleFunc("GET "+p+"/global/firewalls/{name}", s.getFirewall)
	mux.HandleFunc("DELETE "+p+"/global/firewalls/{name}", s.deleteFirewall)
	mux.HandleFunc("GET "+p+"/global/operations/{op}", s.getGlobalOperation)
	mux.HandleFunc("POST "+TokenPath, s.issueToken)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound(r.URL.Path))
	})
	return s.gate(mux)
}

// gate answers a missing or wrong access token, the injected 429 burst and unknown projects
// before any handler.
func (s *Server) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != TokenPath && !s.authorized(r) {
			writeError(w, apiError{code: http.StatusUnauthorized, reason: ReasonAuthError, status: "UNAUTHENTICATED",
				message: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."})
			return
		}
		s.mu.Lock()
		limited := s.burst429 > 0
		if limited {
			s.burst429--
		}
		if r.Method == http.MethodPost && isInsertPath(r.URL.Path) {
			s.insertCalls++
		}
		s.mu.Unlock()
		if limited {
			writeError(w, apiError{code: http.StatusTooManyRequests, reason: ReasonRateLimitExceeded,
				message: rateLimitMessage, status: statusResourceExhausted})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// project checks the request's project and zone (when the route has one); on failure it has
// written the error.
func (s *Server) project(w http.ResponseWriter, r *http.Request) (*zoneState, bool) {
	if p := r.PathValue("project"); p != s.opts.Project {
		writeError(w, notFound("projects/"+p))
		return nil, false
	}
	name := r.PathValue("zone")
	if name == "" {
		return nil, true
	}
	z, ok := s.zones[name]
	if !ok {
		writeError(w, invalid(fmt.Sprintf("Invalid value for field 'zone': '%s'. Unknown zone.", name)))
		return nil, false
	}
	return z, true
}

// isInsertPath is .../zones/{zone}/instances: the calls InsertCalls counts, 429s included.
func isInsertPath(path string) bool {
	return strings.Contains(path, "/zones/") && strings.HasSuffix(path, "/instances")
}

func (s *Server) zoneURL(zone string) string {
	return selfLinkBase + "projects/" + s.opts.Project + "/zones/" + zone
}

func (s *Server) id() uint64 {
	s.nextID++
	return s.nextID
}

func (s *Server) timestamp() string {
	return s.opts.Now().Format("2006-01-02T15:04:05.000-07:00")
}

func writeJSON(w http.ResponseWriter, m proto.Message) {
	b, err := protojson.Marshal(m)
	if err != nil {
		writeError(w, apiError{code: http.StatusInternalServerError, reason: ReasonBackendError, message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = w.Write(b)
}
