package leaser_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser"
)

// httpToken is crawler-a's bearer token; SENTINEL marks it wherever it must not appear.
const httpToken = "tok-SENTINEL-3b9f0c7e5a1d4f28b6e0c9a7d3f1e5b2"

// httpRig is a rig whose leasers also serve the HTTP face, each on a listener of its own.
type httpRig struct {
	*rig
	mu    sync.Mutex
	addrs []string
	obs   *recordingObserver
}

func newHTTPRig(t *testing.T, tlsConfig *tls.Config) *httpRig {
	return newHTTPRigAt(t, tlsConfig, "127.0.0.1")
}

// newHTTPRigAt is newHTTPRig with the faces listening on host.
func newHTTPRigAt(t *testing.T, tlsConfig *tls.Config, host string) *httpRig {
	hr := &httpRig{obs: &recordingObserver{}}
	hr.rig = newRig(t, func(c *leaser.Config) {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		hr.mu.Lock()
		hr.addrs = append(hr.addrs, ln.Addr().String())
		hr.mu.Unlock()
		c.HTTP = &leaser.HTTPConfig{Listener: ln, TLS: tlsConfig, Crawlers: []leaser.Crawler{
			{Name: "crawler-a", TokenSHA256: leaser.TokenHash(httpToken)},
			{Name: "crawler-b", TokenSHA256: leaser.TokenHash("another-token-of-crawler-b-0000000000")},
		}}
		c.Observer = hr.obs
	})
	return hr
}

// post sends body to an endpoint of the i-th leaser's HTTP face with an Authorization
// header (none when auth is empty) and returns the answer in the rig's terms.
func (hr *httpRig) post(hc *http.Client, scheme string, i int, endpoint, auth string, body []byte) (reply, *http.Response) {
	hr.t.Helper()
	hr.mu.Lock()
	addr := hr.addrs[i%len(hr.addrs)]
	hr.mu.Unlock()
	req, err := http.NewRequest(http.MethodPost, scheme+"://"+addr+leaser.HTTPPathPrefix+endpoint, bytes.NewReader(body))
	if err != nil {
		hr.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := hc.Do(req)
	if err != nil {
		hr.t.Fatalf("POST %s: %v", endpoint, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		hr.t.Fatal(err)
	}
	rep := reply{body: b}
	if resp.StatusCode != http.StatusOK {
		rep.code = events.ErrorCode(resp.StatusCode)
		var er events.ErrorReply
		if err := json.Unmarshal(b, &er); err != nil {
			hr.t.Errorf("error body %q: %v", b, err)
		}
		rep.err = er.Error
		if er.Error.Code != rep.code {
			hr.t.Errorf("body code %d, HTTP status %d", er.Error.Code, resp.StatusCode)
		}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		hr.t.Errorf("Content-Type %q", ct)
	}
	return rep, resp
}

type recordingObserver struct {
	mu   sync.Mutex
	seen map[string]int
}

func (o *recordingObserver) ObserveLease(endpoint, result string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[string]int{}
	}
	o.seen[endpoint+"/"+result]++
}

// ObserveWaiting and ObserveWait make it a leaser.WaitObserver: "waiting" is the gauge,
// "wait/<outcome>" the waits ended.
func (o *recordingObserver) ObserveWaiting(delta int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[string]int{}
	}
	o.seen["waiting"] += delta
}

func (o *recordingObserver) ObserveWait(outcome string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[string]int{}
	}
	o.seen["wait/"+outcome]++
}

func (o *recordingObserver) count(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen[key]
}

var (
	leaseTokenRE = regexp.MustCompile(`(\.[0-9]+\.)[0-9a-f]{16}\b`)
	timeRE       = regexp.MustCompile(`"20[0-9]{2}-[0-9]{2}-[0-9]{2}T[^"]*"`)
	msgTimeRE    = regexp.MustCompile(`20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z`) // in a message
)

// normalize masks what differs between two runs of the same requests: lease tokens and times.
func normalize(b []byte) string {
	return msgTimeRE.ReplaceAllString(timeRE.ReplaceAllString(leaseTokenRE.ReplaceAllString(string(b), "${1}<token>"), `"<time>"`), "<time>")
}

// One table drives the NATS micro service and the HTTP face with the same requests, each in a
// rig of its own seeded alike: every answer has the same code and, but for lease tokens and
// times, the same body. The HTTP face then refuses a missing or wrong token, another crawler's
// holder, a wrong method, path or size, and the token appears in no log, reply or event.
func TestHTTPFaceAnswersAsNATSDoes(t *testing.T) {
	const auth = "Bearer " + httpToken
	steps := []struct {
		endpoint, body string
		code           events.ErrorCode
		says           string
		wait           bool // wait for the 1 s lease to have expired first
		// settle repeats a refused acquire (which changes nothing) until it no longer counts
		// the released lease: the release reaches the other replica's view a moment later,
		// and under load the next request can come first.
		settle bool
	}{
		{"acquire", `{"selector":{"geo":"de"},"target":"a.example","ttlSeconds":60,"holder":"crawler-a"}`, 0, `"proxy":"px-a"`, false, false},
		{"acquire", `{"selector":{"geo":"de"}}`, 503, `"atCapacity":1`, false, false},
		{"acquire", `{"target":`, 400, `"field":"(document)"`, false, false},
		{"acquire", ``, 400, `"field":"(document)"`, false, false},
		{"acquire", `{"ttl":60}`, 400, `"field":"ttl"`, false, false},
		{"acquire", `{"ttlSeconds":7200}`, 400, `between 1 and 3600`, false, false},
		{"acquire", `{"target":"a","target":"b"}`, 400, `more than once`, false, false},
		{"acquire", `{"minAnonymity":"high"}`, 400, `"field":"minAnonymity"`, false, false},
		{"acquire", `{"tiers":[{"geo":"de"}]}`, 400, `"field":"tiers"`, false, false},
		{"acquire", `{"target":"a","strategy":"best-for-target","tiers":[{"geo":"de"}],"waitSeconds":5}`, 400, `"field":"waitSeconds"`, false, false},
		{"renew", `{"id":"{{A}}","ttlSeconds":30}`, 0, `"ttlSeconds":30`, false, false},
		{"renew", `{"id":"px-b.0.0123456789abcdef"}`, 404, `unknown or has expired`, false, false},
		{"renew", `{"id":"px-a"}`, 400, `"field":"id"`, false, false},
		{"report", `{"id":"{{A}}","result":"blocked"}`, 400, `"field":"target"`, false, false},
		{"report", `{"id":"{{A}}","result":"meh"}`, 400, `"field":"result"`, false, false},
		{"report", `{"id":"{{A}}","result":"blocked","target":"a.example","cooldownSeconds":60}`, 0, `"cooldownUntil"`, false, false},
		{"acquire", `{"selector":{"geo":"fr"},"target":"b.example","ttlSeconds":1,"holder":"crawler-a"}`, 0, `"proxy":"px-b"`, false, false},
		{"renew", `{"id":"{{B}}"}`, 404, `unknown or has expired`, true, false},
		{"release", `{"id":"{{A}}"}`, 0, `{"released":true}`, false, false},
		{"release", `{"id":"{{A}}"}`, 0, `{"released":false,"reason":"lease px-a.0.`, false, false},
		{"release", `{"id":"{{A}}","x":1}`, 400, `"field":"x"`, false, false},
		{"report", `{"id":"{{A}}","result":"ok"}`, 404, `unknown or has expired`, false, false},
		{"acquire", `{"selector":{"geo":"de"},"target":"a.example"}`, 503, `"coolingTarget":1`, false, true},
		{"acquire", `{"selector":{"geo":"de"},"minAnonymity":"elite"}`, 503, `"belowAnonymity":1`, false, true},
	}
	run := func(t *testing.T, viaHTTP bool) (*httpRig, []string) {
		hr := newHTTPRig(t, nil)
		hr.seed(proxy{name: "px-a", maxLeases: 1, attrs: map[string]string{"geo": "de"}},
			proxy{name: "px-b", maxLeases: 1, attrs: map[string]string{"geo": "fr"}})
		hr.startLeasers(2)
		var answers []string
		ids := map[string]string{}
		for i, s := range steps {
			if s.wait {
				eventually(t, 10*time.Second, "the 1 s lease to expire", func() bool { return hr.slots() == 1 })
			}
			body := s.body
			for k, v := range ids {
				body = strings.ReplaceAll(body, "{{"+k+"}}", v)
			}
			var rep reply
			send := func() {
				if viaHTTP {
					rep, _ = hr.post(http.DefaultClient, "http", i, s.endpoint, auth, []byte(body))
				} else {
					rep = hr.call(events.LeaseSubjectPrefix+"."+s.endpoint, []byte(body))
				}
			}
			send()
			if s.settle {
				eventually(t, 10*time.Second, "the release to reach every leaser's view", func() bool {
					if strings.Contains(string(rep.body), `"atCapacity":0`) {
						return true
					}
					send()
					return false
				})
			}
			if rep.code != s.code || !strings.Contains(string(rep.body), s.says) {
				t.Errorf("step %d %s %s: %d %s, want %d with %s", i, s.endpoint, s.body, rep.code, rep.body, s.code, s.says)
			}
			if s.endpoint == "acquire" && rep.code == 0 {
				var lr events.LeaseReply
				_ = json.Unmarshal(rep.body, &lr)
				ids[string(rune('A'+len(ids)))] = lr.Lease.ID
			}
			answers = append(answers, strconv.Itoa(int(rep.code))+" "+normalize(rep.body))
		}
		return hr, answers
	}
	_, overNATS := run(t, false)
	hr, overHTTP := run(t, true)
	for i := range steps {
		if overNATS[i] != overHTTP[i] {
			t.Errorf("step %d %s %s:\n NATS %s\n HTTP %s", i, steps[i].endpoint, steps[i].body, overNATS[i], overHTTP[i])
		}
	}

	post := func(endpoint, auth, body string) reply {
		rep, _ := hr.post(http.DefaultClient, "http", 0, endpoint, auth, []byte(body))
		return rep
	}
	t.Run("the token's crawler is the holder", func(t *testing.T) {
		rep := post("acquire", auth, `{"selector":{"geo":"fr"},"target":"c.example","ttlSeconds":30}`)
		if rep.code != 0 {
			t.Fatalf("acquire without holder: %d %s", rep.code, rep.body)
		}
		var lr events.LeaseReply
		_ = json.Unmarshal(rep.body, &lr)
		post("release", auth, `{"id":"`+lr.Lease.ID+`"}`)
		// The release's event at least (which lease events are published is configurable).
		eventually(t, 5*time.Second, "the lease's events", func() bool {
			seen := false
			for _, ev := range hr.seenEvents() {
				if ev.Lease != nil && ev.Lease.ID == lr.Lease.ID {
					if ev.Lease.Holder != "crawler-a" {
						t.Fatalf("%s event: holder %q, want crawler-a", ev.Reason, ev.Lease.Holder)
					}
					seen = true
				}
			}
			return seen
		})
		if rep := post("acquire", auth, `{"holder":"crawler-b"}`); rep.code != 400 || rep.err.Field != "holder" {
			t.Errorf("another crawler's holder: %d %s", rep.code, rep.body)
		}
	})

	t.Run("only the holder's token renews, releases or reports", func(t *testing.T) {
		const authB = "Bearer another-token-of-crawler-b-0000000000"
		rep := post("acquire", auth, `{"selector":{"geo":"fr"},"target":"d.example","ttlSeconds":30}`)
		if rep.code != 0 {
			t.Fatalf("acquire: %d %s", rep.code, rep.body)
		}
		var lr events.LeaseReply
		_ = json.Unmarshal(rep.body, &lr)
		id := lr.Lease.ID
		if rep := post("renew", authB, `{"id":"`+id+`"}`); rep.code != 404 || rep.err.Field != "id" || strings.Contains(string(rep.body), `"url"`) {
			t.Errorf("crawler-b renews crawler-a's lease: %d %s", rep.code, rep.body)
		}
		if rep := post("report", authB, `{"id":"`+id+`","result":"failed"}`); rep.code != 404 || rep.err.Field != "id" {
			t.Errorf("crawler-b reports crawler-a's lease: %d %s", rep.code, rep.body)
		}
		if rep := post("release", authB, `{"id":"`+id+`"}`); rep.code != 0 || !strings.Contains(string(rep.body), `"released":false`) {
			t.Errorf("crawler-b releases crawler-a's lease: %d %s", rep.code, rep.body)
		}
		if rep := post("report", authB, `{"id":"`+id+`","result":"ok","release":true}`); rep.code != 404 {
			t.Errorf("crawler-b reports and releases crawler-a's lease: %d %s", rep.code, rep.body)
		}
		if rep := post("renew", auth, `{"id":"`+id+`"}`); rep.code != 0 {
			t.Errorf("crawler-a renews its own lease after crawler-b's attempts: %d %s", rep.code, rep.body)
		}
		if rep := post("release", auth, `{"id":"`+id+`"}`); !strings.Contains(string(rep.body), `"released":true`) {
			t.Errorf("crawler-a releases its own lease: %d %s", rep.code, rep.body)
		}
	})

	t.Run("refused", func(t *testing.T) {
		before := hr.slots()
		for _, c := range []struct {
			name, endpoint, auth string
			code                 events.ErrorCode
			challenge            string
		}{
			{"no token", "acquire", "", 401, `Bearer realm="egressd-leases"`},
			{"empty bearer", "acquire", "Bearer ", 401, `Bearer realm="egressd-leases"`},
			{"basic auth", "acquire", "Basic Y3Jhd2xlcjpwdw==", 401, `Bearer realm="egressd-leases"`},
			{"wrong token", "acquire", "Bearer tok-SENTINEL-wrong", 401, `error="invalid_token"`},
			{"a prefix of the token", "acquire", auth[:len(auth)-1], 401, `error="invalid_token"`},
			{"no token, unknown path", "nope", "", 401, `Bearer realm`},
			{"unknown path", "nope", auth, 404, ""},
		} {
			rep, resp := hr.post(http.DefaultClient, "http", 0, c.endpoint, c.auth, []byte(`{}`))
			if rep.code != c.code || !strings.Contains(resp.Header.Get("WWW-Authenticate"), c.challenge) {
				t.Errorf("%s: %d %s, WWW-Authenticate %q", c.name, rep.code, rep.body, resp.Header.Get("WWW-Authenticate"))
			}
			if strings.Contains(string(rep.body), "SENTINEL") || strings.Contains(fmt.Sprint(resp.Header), "SENTINEL") {
				t.Errorf("%s: the answer quotes the token", c.name)
			}
		}
		if n := hr.obs.count("acquire/unauthorized"); n != 5 {
			t.Errorf("counted %d unauthorized acquires, want 5", n)
		}
		get, err := http.NewRequest(http.MethodGet, "http://"+hr.addrs[0]+leaser.HTTPPathPrefix+"acquire", nil)
		if err != nil {
			t.Fatal(err)
		}
		get.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(get)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
			t.Errorf("GET: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
		}
		huge := `{"target":"` + strings.Repeat("x", leaser.DefaultHTTPMaxBody) + `"}`
		if rep := post("acquire", auth, huge); rep.code != 413 {
			t.Errorf("a body over the limit: %d %s", rep.code, rep.body)
		}
		if after := hr.slots(); after != before {
			t.Errorf("refused requests changed the slots: %d → %d", before, after)
		}
	})

	t.Run("the token is in no log, reply or event", func(t *testing.T) {
		if logs := hr.logs.String(); strings.Contains(logs, "SENTINEL") || !strings.Contains(logs, "lease HTTP face started") {
			t.Errorf("the logs carry the token, or are not captured")
		}
		hr.rig.mu.Lock()
		defer hr.rig.mu.Unlock()
		for _, b := range hr.rig.events {
			if strings.Contains(string(b), "SENTINEL") {
				t.Errorf("an event carries the token: %s", b)
			}
		}
	})
}

// The HTTP face over TLS: a client that trusts the certificate gets its lease, a plain-HTTP
// request to the TLS port gets none.
func TestHTTPFaceOverTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	hr := newHTTPRig(t, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	hr.seed(proxy{name: "px-a", maxLeases: 1})
	hr.startLeasers(1)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	rep, _ := hr.post(hc, "https", 0, "acquire", "Bearer "+httpToken, []byte(`{"ttlSeconds":30}`))
	if rep.code != 0 || !strings.Contains(string(rep.body), `"proxy":"px-a"`) {
		t.Fatalf("acquire over TLS: %d %s", rep.code, rep.body)
	}
	resp, err := http.Post("http://"+hr.addrs[0]+leaser.HTTPPathPrefix+"acquire", "application/json", strings.NewReader(`{}`))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP was answered on the TLS listener")
		}
	}
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egressd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, IsCA: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// SetHTTPCrawlers takes effect from the next request: a new crawler gets in, a revoked token
// gets 401, and a lease acquired before the change stays its holder's to release.
func TestHTTPCrawlersSwapWithoutRestart(t *testing.T) {
	hr := newHTTPRig(t, nil)
	hr.seed(proxy{name: "px-a", maxLeases: 2})
	hr.startLeasers(1)
	hc := &http.Client{Timeout: 10 * time.Second}
	rep, _ := hr.post(hc, "http", 0, "acquire", "Bearer "+httpToken, []byte(`{"ttlSeconds":30}`))
	if rep.code != 0 {
		t.Fatalf("acquire: %d %s", rep.code, rep.body)
	}
	var granted events.LeaseReply
	if err := json.Unmarshal(rep.body, &granted); err != nil {
		t.Fatal(err)
	}
	const newToken = "new-token-of-crawler-c-00000000000000"
	if err := hr.ls[0].SetHTTPCrawlers([]leaser.Crawler{{Name: "crawler-c", TokenSHA256: leaser.TokenHash(newToken)}}); err != nil {
		t.Fatal(err)
	}
	if rep, _ := hr.post(hc, "http", 0, "acquire", "Bearer "+httpToken, []byte(`{"ttlSeconds":30}`)); rep.code != events.CodeUnauthorized {
		t.Fatalf("a revoked token: %d %s, want 401", rep.code, rep.body)
	}
	rep, _ = hr.post(hc, "http", 0, "acquire", "Bearer "+newToken, []byte(`{"ttlSeconds":30}`))
	if rep.code != 0 {
		t.Fatalf("the new crawler: %d %s", rep.code, rep.body)
	}
	// Over NATS the old lease is still there, released by its ID.
	if r := hr.call(events.LeaseReleaseSubject, events.ReleaseRequest{ID: granted.Lease.ID}); r.code != 0 {
		t.Fatalf("release of the lease from before: %d %s", r.code, r.body)
	}
	for _, bad := range [][]leaser.Crawler{
		{{Name: "x", TokenSHA256: leaser.TokenHash("a")}, {Name: "x", TokenSHA256: leaser.TokenHash("b")}},
		{{Name: "y"}},
	} {
		if err := hr.ls[0].SetHTTPCrawlers(bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
	// A refused list changed nothing.
	if rep, _ := hr.post(hc, "http", 0, "acquire", "Bearer "+newToken, []byte(`{"ttlSeconds":30}`)); rep.code != 0 {
		t.Fatalf("after a refused swap: %d %s", rep.code, rep.body)
	}
	if err := hr.ls[0].SetHTTPCrawlers(nil); err != nil {
		t.Fatal(err)
	}
	if rep, _ := hr.post(hc, "http", 0, "acquire", "Bearer "+newToken, []byte(`{"ttlSeconds":30}`)); rep.code != events.CodeUnauthorized {
		t.Fatalf("with no crawlers: %d %s, want 401", rep.code, rep.body)
	}
}
