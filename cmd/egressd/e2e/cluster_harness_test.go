package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The cluster harness runs the README's production story for real: three nats-server
// processes (the binary `make tools` builds from the nats-server module in go.mod) loading
// deploy/nats's node-N.conf and nats-server.conf, adapted only to loopback ports and a temp
// store; `egressd setup --replicas 3` as admin; and every role as its own `egressd run
// --roles …` process under its own NATS user, over TLS.

// clusterPasswords are the test's passwords of the users deploy/nats/nats-server.conf
// declares (provisioner-kvm-home is declared there too, so the server needs it).
var clusterPasswords = map[string]string{
	"sys":                  "sys-cluster-password",
	"admin":                "admin-cluster-password",
	"reconciler":           "reconciler-cluster-password",
	"provisioner-local":    "provisioner-local-cluster-password",
	"provisioner-kvm-home": "provisioner-kvm-home-cluster-password",
	"prober":               "prober-cluster-password",
	"leaser":               "leaser-cluster-password",
	"crawler":              "crawler-cluster-password",
	"viewer":               "viewer-cluster-password",
}

// clusterRoles is how many processes of each role the harness starts, and as which user.
var clusterRoles = []struct {
	role, user string
	count      int
}{
	{"reconciler", "reconciler", 2},
	{"provisioner", "provisioner-local", 2},
	{"prober", "prober", 2},
	{"leaser", "leaser", 3},
}

// deployDir is where the deployment files live, from this package's directory.
// The environment egressd reads NATS credentials from (docs/cli.md).
const (
	envUser     = "EGRESSD_NATS_USER"
	envPassword = "EGRESSD_NATS_PASSWORD"
	envCA       = "EGRESSD_NATS_CA"
)

const deployDir = "../../../deploy/nats"

var (
	natsServerOnce sync.Once
	natsServerPath string
	natsServerErr  error
)

// needNatsServer returns bin/nats-server (from `make tools`) after checking that it is the
// version go.mod pins, so the cluster tests never run against a stale build.
func needNatsServer(t testing.TB) string {
	t.Helper()
	natsServerOnce.Do(func() {
		p, err := filepath.Abs("../../../bin/nats-server")
		if err != nil {
			natsServerErr = err
			return
		}
		out, err := exec.Command(p, "--version").Output()
		if err != nil {
			natsServerErr = fmt.Errorf("%s: %w (run `make tools`)", p, err)
			return
		}
		// The version go.mod pins, from go.mod itself: this black-box package does not link
		// nats-server, so its build info does not name it.
		pinned, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2").Output()
		if err != nil {
			natsServerErr = fmt.Errorf("go list -m github.com/nats-io/nats-server/v2: %w", err)
			return
		}
		want := strings.TrimSpace(string(pinned))
		if got := strings.TrimSpace(strings.TrimPrefix(string(out), "nats-server: ")); got != want {
			natsServerErr = fmt.Errorf("%s is %s, go.mod has %s (run `make tools`)", p, got, want)
			return
		}
		natsServerPath = p
	})
	if natsServerErr != nil {
		t.Fatal("the cluster tests need bin/nats-server: ", natsServerErr)
	}
	return natsServerPath
}

// natsProc is one nats-server process of the cluster.
type natsProc struct {
	name                   string // server_name from node-N.conf
	dir                    string
	client, route, monitor int // ports
	clientURL, monitorURL  string
	cmd                    *exec.Cmd
	exited                 chan struct{}
	log                    *node // only its log buffer
	starts                 int
}

// cluster is three nats-servers and the egressd processes on them.
type cluster struct {
	t       testing.TB
	dir     string
	bin     string
	egressd string // the egressd binary setup and startRole run: the current build unless the test says
	servers []*natsProc
	urls    string // every client URL, comma-separated, as the roles get them
	caFile  string
	env     []string // the servers' environment: TLS files and passwords
	cfg     string   // the egressd config (one local provider)
	admin   *node    // never started: runs nats and egressd commands as admin
	roles   map[string][]*node
}

// clusterOptions adjust what the harness starts.
type clusterOptions struct {
	net       int      // the local provider's addresses are 127.0.<net>.2-250
	leaderTTL string   // --leader-ttl of the reconcilers
	extra     []string // more flags for the provisioners (GC)
	egressd   string   // the egressd binary of setup and the roles (an older release); "" is the current build
	noRoles   bool     // set up, but start no role: the test starts its own
}

// startCluster starts the three servers, declares with `egressd setup --replicas 3` and
// starts every role. Everything it starts is stopped by t.Cleanup; forward proxies left by a
// failed test are killed.
func startCluster(t testing.TB, o clusterOptions) *cluster {
	t.Helper()
	needNats(t)
	c := &cluster{t: t, dir: t.TempDir(), bin: needNatsServer(t), egressd: cmp.Or(o.egressd, egressdBin), roles: map[string][]*node{}}
	t.Cleanup(func() { killProcs(t, c.dir) }) // after every role has stopped (LIFO)
	c.writeTLS()
	for user, pw := range clusterPasswords {
		c.env = append(c.env, "EGRESSD_"+strings.ToUpper(strings.ReplaceAll(user, "-", "_"))+"_PASSWORD="+pw)
	}
	var urls []string
	ports := reservePorts(t, 9)
	for i := range 3 {
		s := &natsProc{name: fmt.Sprintf("nats-%d", i+1), dir: filepath.Join(c.dir, fmt.Sprintf("nats-%d", i+1)),
			client: ports[3*i], route: ports[3*i+1], monitor: ports[3*i+2], log: &node{}}
		s.clientURL = fmt.Sprintf("nats://127.0.0.1:%d", s.client)
		s.monitorURL = fmt.Sprintf("http://127.0.0.1:%d", s.monitor)
		urls = append(urls, s.clientURL)
		c.servers = append(c.servers, s)
	}
	c.urls = strings.Join(urls, ",")
	c.writeServerConfigs()
	for _, s := range c.servers {
		c.startServer(s)
	}
	t.Cleanup(func() {
		for _, s := range c.servers {
			c.killServer(s)
			if t.Failed() {
				t.Logf("%s log (tail):\n%s", s.name, tail(s.log.logs(), 3000))
			}
		}
	})
	for _, s := range c.servers {
		c.waitHealthy(s)
	}
	c.waitMetaComplete()

	c.cfg = writeConfig(t, c.dir, o.net)
	c.admin = &node{t: t, dir: c.dir, url: c.urls, env: c.userEnv("admin")}
	// Right after the cluster forms, the meta leader may still count a peer offline for a
	// moment, and a stream of three replicas then finds no place: setup itself waits that out
	// (ensureWhileClusterForms), so one run must succeed, as it must for an operator.
	out, err := c.tryEgressdAs("admin", "setup", "--nats-url", c.urls, "--replicas", "3", "--config", c.cfg, "--data-dir", c.dataDir())
	if err != nil {
		t.Fatalf("egressd setup --replicas 3: %v: %s", err, out)
	}
	if !strings.Contains(out, "OPS_local") {
		t.Fatalf("egressd setup: %s", out)
	}
	if o.noRoles {
		return c
	}
	leaderTTL := o.leaderTTL
	if leaderTTL == "" {
		leaderTTL = "5s"
	}
	for _, r := range clusterRoles {
		for range r.count {
			args := []string{"--roles", r.role}
			switch r.role {
			case "reconciler":
				args = append(args, "--leader-ttl", leaderTTL, "--lease-leader-spread", "2s")
			case "provisioner":
				args = append(append(args, "--provision", "local", "--config", c.cfg), o.extra...)
			}
			c.startRole(r.role, r.user, args...)
		}
	}
	return c
}

func (c *cluster) dataDir() string { return filepath.Join(c.dir, "data") }

// userEnv is what a process needs to log in as user: egressd's variables and the nats CLI's.
func (c *cluster) userEnv(user string) []string {
	pw := clusterPasswords[user]
	return []string{envUser + "=" + user, envPassword + "=" + pw, envCA + "=" + c.caFile,
		"NATS_USER=" + user, "NATS_PASSWORD=" + pw, "NATS_CA=" + c.caFile}
}

// startRole starts `egressd run` with one role as user and waits until it says it runs.
func (c *cluster) startRole(role, user string, args ...string) *node {
	c.t.Helper()
	n := &node{t: c.t, dir: c.dir, url: c.urls, env: c.userEnv(user), bin: c.egressd}
	n.args = append([]string{"run", "--nats-url", c.urls, "--metrics-listen", "127.0.0.1:0",
		"--data-dir", c.dataDir(), "--log-level", "info"}, args...)
	n.start()
	c.roles[role] = append(c.roles[role], n)
	c.t.Cleanup(func() {
		n.stop()
		if c.t.Failed() {
			c.t.Logf("%s %d log (tail):\n%s", role, n.cmd.Process.Pid, tail(n.logs(), 3000))
		}
	})
	return n
}

// tryEgressdAs runs an egressd command as user and returns its combined output.
func (c *cluster) tryEgressdAs(user string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.egressd, args...)
	cmd.Env = append(os.Environ(), c.userEnv(user)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// connect opens a connection as user to every server, reconnecting for ever.
func (c *cluster) connect(user string, opts ...nats.Option) *nats.Conn {
	c.t.Helper()
	return c.connectTo(user, c.urls, opts...)
}

// connectTo opens a connection as user to the servers of urls (comma-separated).
func (c *cluster) connectTo(user, urls string, opts ...nats.Option) *nats.Conn {
	c.t.Helper()
	opts = append([]nats.Option{nats.UserInfo(user, clusterPasswords[user]), nats.CustomInboxPrefix("_INBOX_" + user),
		nats.RootCAs(c.caFile), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.Name("cluster test " + user)}, opts...)
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		c.t.Fatalf("connect as %s: %v", user, err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

func (c *cluster) jetStream(nc *nats.Conn) jetstream.JetStream {
	c.t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	return js
}

// writeServerConfigs writes, for each server, node-N.conf as deployed and nats-server.conf
// with its ports, store and routes on loopback. Every replacement must match exactly once,
// so a change to the deployed files fails here instead of silently testing something else.
func (c *cluster) writeServerConfigs() {
	c.t.Helper()
	shared, err := os.ReadFile(filepath.Join(deployDir, "nats-server.conf"))
	if err != nil {
		c.t.Fatal(err)
	}
	for i, s := range c.servers {
		nodeConf, err := os.ReadFile(filepath.Join(deployDir, fmt.Sprintf("node-%d.conf", i+1)))
		if err != nil {
			c.t.Fatal(err)
		}
		for _, want := range []string{`server_name: "` + s.name + `"`, `include "nats-server.conf"`} {
			if !strings.Contains(string(nodeConf), want) {
				c.t.Fatalf("deploy/nats/node-%d.conf: no %s", i+1, want)
			}
		}
		conf := string(shared)
		replace := func(old, new string) {
			if n := strings.Count(conf, old); n != 1 {
				c.t.Fatalf("deploy/nats/nats-server.conf: %q occurs %d times, the harness expects it once", old, n)
			}
			conf = strings.Replace(conf, old, new, 1)
		}
		replace(`listen: "0.0.0.0:4222"`, fmt.Sprintf(`listen: "127.0.0.1:%d"`, s.client))
		replace(`http: "127.0.0.1:8222"`, fmt.Sprintf(`http: "127.0.0.1:%d"`, s.monitor))
		replace(`store_dir: "/var/lib/nats/jetstream"`, fmt.Sprintf("store_dir: %q", filepath.Join(s.dir, "jetstream")))
		replace(`max_file_store: 20GB`, `max_file_store: 2GB`)
		replace(`listen: "0.0.0.0:6222"`, fmt.Sprintf(`listen: "127.0.0.1:%d"`, s.route))
		for j, o := range c.servers {
			replace(fmt.Sprintf(`"nats-route://nats-%d.egressd.internal:6222"`, j+1), fmt.Sprintf(`"nats-route://127.0.0.1:%d"`, o.route))
		}
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			c.t.Fatal(err)
		}
		for name, b := range map[string][]byte{"nats-server.conf": []byte(conf), fmt.Sprintf("node-%d.conf", i+1): nodeConf} {
			if err := os.WriteFile(filepath.Join(s.dir, name), b, 0o600); err != nil {
				c.t.Fatal(err)
			}
		}
	}
}

// startServer starts (or restarts) one nats-server in a process group of its own.
func (c *cluster) startServer(s *natsProc) {
	c.t.Helper()
	n, _ := strings.CutPrefix(s.name, "nats-")
	s.cmd = exec.Command(c.bin, "-c", "node-"+n+".conf")
	s.cmd.Dir = s.dir
	s.cmd.Env = append(os.Environ(), c.env...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(s.cmd, s.exited)
	s.starts++
}

// killServer kills -9 a server's process group and waits for it.
func (c *cluster) killServer(s *natsProc) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// waitHealthy waits for a server's /healthz: it answers 200 once it is in the cluster with
// JetStream current (a meta leader known, its streams caught up).
func (c *cluster) waitHealthy(s *natsProc) {
	c.t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	waitUntil(c.t, s.name+" healthy", 90*time.Second, func() (bool, string) {
		select {
		case <-s.exited:
			c.t.Fatalf("%s exited: %v\n%s", s.name, s.cmd.ProcessState, tail(s.log.logs(), 3000))
		default:
		}
		resp, err := hc.Get(s.monitorURL + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var body struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode == http.StatusOK, body.Status + " " + body.Error
	})
}

// server returns the server with this server_name.
func (c *cluster) server(name string) *natsProc {
	for _, s := range c.servers {
		if s.name == name {
			return s
		}
	}
	c.t.Fatalf("no server %q", name)
	return nil
}
