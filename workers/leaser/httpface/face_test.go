package httpface

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// What the face refuses on its own never reaches the service: it runs here with no service at
// all (a call would panic), on a real listener, and answers each refusal with the service's
// error body and the code as the status. Stopping it ends its goroutine (TestMain's goleak).
func TestFaceRefusesBeforeTheService(t *testing.T) {
	const token = "tok-0123456789abcdef0123456789abcdef"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Listener: ln, Crawlers: []Crawler{{Name: "crawler-a", TokenSHA256: TokenHash(token)}}, MaxBodyBytes: 1024}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	face := New(cfg, nil, slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	failed := make(chan error, 1)
	stop := face.Start(context.Background(), &wg, failed, time.Second, 5*time.Second)
	defer wg.Wait()
	defer stop()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	base := "http://" + ln.Addr().String()
	for _, tc := range []struct {
		name, method, path, auth, body string
		code                           events.ErrorCode
		field, header, headerWant      string
	}{
		{"no token, unknown path", http.MethodPost, "/nope", "", "{}", events.CodeUnauthorized, "", "WWW-Authenticate", `Bearer realm="egressd-leases"`},
		{"wrong token", http.MethodPost, "/x", "Bearer not-it", "{}", events.CodeUnauthorized, "", "WWW-Authenticate", `Bearer realm="egressd-leases", error="invalid_token"`},
		{"unknown endpoint", http.MethodPost, PathPrefix + "lease", "Bearer " + token, "{}", events.CodeNotFound, "", "", ""},
		{"GET", http.MethodGet, PathPrefix + "acquire", "Bearer " + token, "", events.CodeMethodNotAllowed, "", "Allow", http.MethodPost},
		{"too large", http.MethodPost, PathPrefix + "acquire", "Bearer " + token, strings.Repeat("x", 1025), events.CodeTooLarge, "(document)", "", ""},
	} {
		req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var reply events.ErrorReply
		derr := json.NewDecoder(resp.Body).Decode(&reply)
		_ = resp.Body.Close()
		switch {
		case derr != nil:
			t.Errorf("%s: body: %v", tc.name, derr)
		case resp.StatusCode != int(tc.code) || reply.Error.Code != tc.code || reply.Error.Field != tc.field || reply.Error.Message == "":
			t.Errorf("%s: %d %+v, want %d field %q", tc.name, resp.StatusCode, reply.Error, tc.code, tc.field)
		case resp.Header.Get("Cache-Control") != "no-store":
			t.Errorf("%s: Cache-Control %q", tc.name, resp.Header.Get("Cache-Control"))
		case tc.header != "" && resp.Header.Get(tc.header) != tc.headerWant:
			t.Errorf("%s: %s %q, want %q", tc.name, tc.header, resp.Header.Get(tc.header), tc.headerWant)
		}
	}
	select {
	case err := <-failed:
		t.Fatalf("the server failed: %v", err)
	default:
	}
}

// A crawler list with a duplicate, a missing hash or a name out of bounds is refused naming
// the crawler, and a refused swap keeps the crawlers in force.
func TestCrawlerListsAreChecked(t *testing.T) {
	a, b := TokenHash("a"), TokenHash("b")
	for _, tc := range []struct {
		list []Crawler
		want string
	}{
		{[]Crawler{{Name: "x", TokenSHA256: a}, {Name: "x", TokenSHA256: b}}, `crawler "x" appears twice`},
		{[]Crawler{{Name: "x", TokenSHA256: a}, {Name: "y", TokenSHA256: a}}, `crawler "y" has the token hash of another crawler`},
		{[]Crawler{{Name: "x"}}, `crawler "x" has no token hash`},
		{[]Crawler{{Name: "", TokenSHA256: a}}, "crawler 0: the name must be 1 to 256 bytes"},
		{[]Crawler{{Name: strings.Repeat("n", 257), TokenSHA256: a}}, "crawler 0: the name must be 1 to 256 bytes"},
	} {
		if err := CheckCrawlers(tc.list); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.list, err, tc.want)
		}
	}
	face := New(Config{Crawlers: []Crawler{{Name: "x", TokenSHA256: a}}}, nil, slog.New(slog.DiscardHandler))
	if err := face.SetCrawlers([]Crawler{{Name: "x"}}); err == nil {
		t.Fatal("a crawler without a hash was taken")
	}
	r, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1"+PathPrefix+"acquire", nil)
	r.Header.Set("Authorization", "Bearer a")
	if name, aerr := face.authenticate(r); aerr != nil || name != "x" {
		t.Fatalf("after a refused swap: %q %v", name, aerr)
	}
	if err := (&Config{Crawlers: []Crawler{{Name: "x", TokenSHA256: a}}}).Check(); err == nil || !strings.Contains(err.Error(), "listener") {
		t.Fatalf("a config without a listener: %v", err)
	}
}
