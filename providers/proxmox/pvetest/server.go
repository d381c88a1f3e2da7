package pvetest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"sync"
	"time"
)

// Options configures a simulator. Only Addresses and Serve are required.
type Options struct {
	// Nodes served, in order; default {"pv1-1"} (the node of F1–F23).
	Nodes []string
	// Storages on every node; default DefaultStorages(): local-lvm (images, lvmthin) and
	// local (iso, vztmpl, backup, dir).
	Storages []Storage
	// Templates present at start; default one: DefaultTemplate() (9001 as in F19) on Nodes[0].
	Templates []Template
	// Tokens accepted in Authorization: PVEAPIToken=<ID>=<Secret>; default one,
	// egressd@pve!egressd with a random secret (Token() returns it).
	Tokens []Token
	// Addresses is the loopback pool: each started VM takes one, its agent reports it on
	// eth0 and its forward proxy listens there. A start with the pool empty fails its task.
	Addresses []netip.Addr
	// Serve runs a booted VM's forward proxy (see ServeFunc).
	Serve ServeFunc
	// Timing of the asynchronous steps; zero fields take the short defaults.
	Timing Timing
	// CloneContention, when > 0, makes a clone fail in its task with the lock timeout users
	// of parallel clones report (bpg/terraform-provider-proxmox #995, #1521) whenever it
	// starts while that many clones are already in flight on the same node and storage.
	CloneContention int
	// Listen is the API's address; default 127.0.0.1:0.
	Listen string
	// TLS serves https with a self-signed certificate (CACertPEM), HTTP/1.1 only (F18).
	TLS bool
	// Version is what GET /version reports; default "9.2.20" (the captured release).
	Version string
	// Logger receives the simulator's own notes; nil discards.
	Logger *slog.Logger
	// Now is the clock for timestamps (UPID starttime, uptime, ctime); nil: time.Now.
	Now func() time.Time
}

// Timing holds the durations of the simulator's asynchronous steps. Real PVE: a full clone
// of a 3 GiB template ~2 s (F16), start ~5 s, agent address ~50 s after start (F21).
type Timing struct {
	Clone time.Duration // the qmclone task, during which the new VM is locked (clone); default 100ms
	Task  time.Duration // every other task (start, stop, resize, destroy, imgcopy, imgdel); default 20ms
	Boot  time.Duration // from a finished start to the agent answering and the proxy listening; default 100ms
}

// CapturedTiming is the pace of the captured PVE 9.2.20 (F16; the VLAN rerun: clone 4 s,
// seed 4 s, config 4 s, start 5 s, IP 47 s after start): for watching a provider work at
// real speed, not for tests.
var CapturedTiming = Timing{Clone: 4 * time.Second, Task: 4 * time.Second, Boot: 47 * time.Second}

func (t Timing) withDefaults() Timing {
	if t.Clone == 0 {
		t.Clone = 100 * time.Millisecond
	}
	if t.Task == 0 {
		t.Task = 20 * time.Millisecond
	}
	if t.Boot == 0 {
		t.Boot = 100 * time.Millisecond
	}
	return t
}

// Token is one API token: ID is user@realm!tokenid, Secret its value (a UUID on real PVE).
type Token struct {
	ID     string
	Secret string
}

// Storage is a storage defined on every node.
type Storage struct {
	ID       string   // e.g. "local-lvm", "proxy-seeds"
	Type     string   // "lvmthin", "dir", ...; dir-like types hold ISO files
	Content  []string // "images", "iso", "vztmpl", "backup", "rootdir", "import"
	TotalGiB int      // reported by status; default 100
	Shared   bool
}

// DefaultStorages is a fresh PVE install's pair: local-lvm for disks, local for ISOs.
func DefaultStorages() []Storage {
	return []Storage{
		{ID: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}, TotalGiB: 100},
		{ID: "local", Type: "dir", Content: []string{"iso", "vztmpl", "backup", "import"}, TotalGiB: 100},
	}
}

// Node-down answers: pveproxy failing to reach the node a call is proxied to
// (pveproxy failing to reach another node).
const (
	StatusNoRoute  = 595 // "595 No route to host"
	StatusTimedOut = 596 // "596 Connection timed out"
)

// Server is a running simulator. Close stops every task, boot and forward proxy.
type Server struct {
	opts   Options
	timing Timing
	http   *httptest.Server
	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup // tasks, boots and proxies
	closed sync.Once
	dir    string // auth files of running proxies

	mu         sync.Mutex
	vms        map[int]*vm
	storages   map[string]*storage // node/storage
	tasks      map[string]*task    // by UPID
	free       []netip.Addr
	faults     map[faultKey][]Fault
	down       map[string]int // node → 595/596
	pid        uint32
	cloning    map[string]int // node/storage → clones in flight
	maxCloning map[string]int // its high-water mark
	calls      map[string]int // "POST clone" → accepted-or-not calls
}

var (
	nodeRE    = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$`)
	storageRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9\-_.]*[a-zA-Z0-9]$`)
	tokenIDRE = regexp.MustCompile(`^[^\s@!=]+@[A-Za-z][A-Za-z0-9.\-_]+![A-Za-z][A-Za-z0-9.\-_]+$`)
)

// New starts a simulator.
func New(opts Options) (*Server, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{
		opts:       opts,
		timing:     opts.Timing.withDefaults(),
		ctx:        ctx,
		stop:       stop,
		vms:        map[int]*vm{},
		storages:   map[string]*storage{},
		tasks:      map[string]*task{},
		free:       slices.Clone(opts.Addresses),
		faults:     map[faultKey][]Fault{},
		down:       map[string]int{},
		pid:        0x000A1B00,
		cloning:    map[string]int{},
		maxCloning: map[string]int{},
		calls:      map[string]int{},
	}
	for _, n := range opts.Nodes {
		for _, st := range opts.Storages {
			s.storages[n+"/"+st.ID] = newStorage(st)
		}
	}
	for _, t := range opts.Templates {
		if err := s.addTemplate(t); err != nil {
			stop()
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "pvetest-")
	if err != nil {
		stop()
		return nil, fmt.Errorf("pvetest: %w", err)
	}
	s.dir = dir
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		stop()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pvetest: Options.Listen: %w", err)
	}
	s.http = httptest.NewUnstartedServer(s.routes())
	s.http.Listener.Close()
	s.http.Listener = ln
	// The standard library's error log would print client noise (TLS probes, resets).
	s.http.Config.ErrorLog = slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug)
	if opts.TLS {
		cert, err := selfSigned(ln.Addr().(*net.TCPAddr).IP)
		if err != nil {
			stop()
			ln.Close()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pvetest: certificate: %w", err)
		}
		s.http.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
		s.http.EnableHTTP2 = false // F18: HTTP/1.1 only
		s.http.StartTLS()
	} else {
		s.http.Start()
	}
	return s, nil
}

func (o *Options) fill() error {
	if len(o.Nodes) == 0 {
		o.Nodes = []string{"pv1-1"}
	}
	for i, n := range o.Nodes {
		if !nodeRE.MatchString(n) || slices.Index(o.Nodes, n) != i {
			return fmt.Errorf("pvetest: Options.Nodes[%d] %q is not a node name or is repeated", i, n)
		}
	}
	if len(o.Storages) == 0 {
		o.Storages = DefaultStorages()
	}
	for i, st := range o.Storages {
		if !storageRE.MatchString(st.ID) || slices.IndexFunc(o.Storages, func(x Storage) bool { return x.ID == st.ID }) != i {
			return fmt.Errorf("pvetest: Options.Storages[%d].ID %q is not a storage ID or is repeated", i, st.ID)
		}
	}
	if o.Templates == nil {
		o.Templates = []Template{DefaultTemplate()}
	}
	if len(o.Tokens) == 0 {
		o.Tokens = []Token{{ID: "egressd@pve!egressd", Secret: uuid()}}
	}
	for i, t := range o.Tokens {
		if !tokenIDRE.MatchString(t.ID) || t.Secret == "" {
			return fmt.Errorf("pvetest: Options.Tokens[%d]: ID %q is not user@realm!tokenid or Secret is empty", i, t.ID)
		}
	}
	for i, a := range o.Addresses {
		if !a.Is4() || !a.IsLoopback() {
			return fmt.Errorf("pvetest: Options.Addresses[%d] %s is not an IPv4 loopback address", i, a)
		}
	}
	if len(o.Addresses) == 0 {
		return errors.New("pvetest: Options.Addresses is empty")
	}
	if o.Serve == nil {
		return errors.New("pvetest: Options.Serve is nil")
	}
	if o.CloneContention < 0 {
		return errors.New("pvetest: Options.CloneContention is negative")
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.Version == "" {
		o.Version = "9.2.20"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// URL is the API's base, scheme://host:port, without /api2/json: the value of a provider's
// `url` setting.
func (s *Server) URL() string { return s.http.URL }

// Token is the first configured token as a token file holds it: user@realm!tokenid=secret.
func (s *Server) Token() string { return s.opts.Tokens[0].ID + "=" + s.opts.Tokens[0].Secret }

// CACertPEM is the TLS server's certificate in PEM (with Options.TLS), for a provider's caFile;
// nil without TLS.
func (s *Server) CACertPEM() []byte {
	if s.http.TLS == nil || len(s.http.TLS.Certificates) == 0 {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.http.TLS.Certificates[0].Certificate[0]})
}

// CertPool is CACertPEM as a pool, for a test's own client; nil without TLS.
func (s *Server) CertPool() *x509.CertPool {
	if s.http.Certificate() == nil {
		return nil
	}
	p := x509.NewCertPool()
	p.AddCert(s.http.Certificate())
	return p
}

// Close stops the API, every task and boot in flight and every forward proxy, and waits for
// them. Calling it again is harmless.
func (s *Server) Close() {
	s.closed.Do(func() {
		s.stop()
		s.http.Close()
		s.wg.Wait()
		s.mu.Lock()
		var ps []*proxy
		for _, v := range s.vms {
			ps = append(ps, v.proxy)
			v.proxy = nil
		}
		s.mu.Unlock()
		for _, p := range ps {
			p.stop()
		}
		os.RemoveAll(s.dir)
	})
}

func (s *Server) now() time.Time { return s.opts.Now() }

// sleep waits d, false when the simulator closes first.
func (s *Server) sleep(d time.Duration) bool {
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// uuid is a random version-4 UUID, the form of PVE token secrets and smbios1 uuids.
func uuid() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	const p = "/api2/json"
	const q = p + "/nodes/{node}/qemu/{vmid}"
	mux.HandleFunc("GET "+p+"/version", s.version)
	mux.HandleFunc("GET "+p+"/cluster/resources", s.clusterResources)
	mux.HandleFunc("GET "+p+"/cluster/nextid", s.nextID)
	mux.HandleFunc("GET "+p+"/nodes/{node}/status", s.nodeStatus)
	mux.HandleFunc("GET "+p+"/nodes/{node}/tasks/{upid}/status", s.taskStatus)
	mux.HandleFunc("GET "+p+"/nodes/{node}/storage/{storage}/status", s.storageStatus)
	mux.HandleFunc("GET "+p+"/nodes/{node}/storage/{storage}/content", s.listContent)
	mux.HandleFunc("POST "+p+"/nodes/{node}/storage/{storage}/upload", s.upload)
	mux.HandleFunc("DELETE "+p+"/nodes/{node}/storage/{storage}/content/{volume...}", s.deleteVolume)
	mux.HandleFunc("GET "+q+"/config", s.getConfig)
	mux.HandleFunc("PUT "+q+"/config", s.putConfig)
	mux.HandleFunc("POST "+q+"/clone", s.clone)
	mux.HandleFunc("PUT "+q+"/resize", s.resize)
	mux.HandleFunc("POST "+q+"/status/start", s.start)
	mux.HandleFunc("POST "+q+"/status/stop", s.stopVM)
	mux.HandleFunc("GET "+q+"/status/current", s.statusCurrent)
	mux.HandleFunc("GET "+q+"/agent/network-get-interfaces", s.agentInterfaces)
	mux.HandleFunc("DELETE "+q, s.destroy)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// pve-http-server answers an unknown path with 501 "Method 'GET /x' not implemented".
		writeError(w, errorf(http.StatusNotImplemented, "Method '%s %s' not implemented", r.Method, r.URL.Path))
	})
	return s.gate(mux)
}
