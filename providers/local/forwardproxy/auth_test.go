package forwardproxy

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAuthRequiredAcceptedRejected(t *testing.T) {
	upstream, seen := recordingServer(t, false)
	tlsUpstream, _ := recordingServer(t, true)
	authFile := filepath.Join(t.TempDir(), "auth")
	if err := WriteAuthFile(authFile, "crawler", "pa:ss word"); err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, Config{AuthFile: authFile})

	get := func(user *url.Userinfo) *http.Response { t.Helper(); return getVia(t, proxy, upstream.URL+"/", user) }
	resp := get(nil)
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("no credential: status %d, want 407", resp.StatusCode)
	}
	if got := resp.Header.Get("Proxy-Authenticate"); got != `Basic realm="egressd"` {
		t.Errorf("Proxy-Authenticate = %q", got)
	}
	for _, u := range []*url.Userinfo{
		url.UserPassword("crawler", "wrong"),
		url.UserPassword("other", "pa:ss word"),
		url.UserPassword("crawler", ""),
	} {
		if resp := get(u); resp.StatusCode != http.StatusProxyAuthRequired {
			t.Errorf("%s: status %d, want 407", u.Username(), resp.StatusCode)
		}
	}
	if resp := get(url.UserPassword("crawler", "pa:ss word")); resp.StatusCode != 200 {
		t.Fatalf("right credential: status %d", resp.StatusCode)
	}
	assertNoLeaks(t, seen().header)

	// CONNECT is guarded too.
	dial := func(user *url.Userinfo) error {
		tr := tlsUpstream.Client().Transport.(*http.Transport).Clone()
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxy, User: user})
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(tlsUpstream.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := dial(url.UserPassword("crawler", "wrong")); err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
		t.Errorf("CONNECT with a wrong password: %v", err)
	}
	if err := dial(url.UserPassword("crawler", "pa:ss word")); err != nil {
		t.Errorf("CONNECT with the right password: %v", err)
	}
}

// getVia fetches target through proxy with user's credentials (none: nil), body drained.
func getVia(t *testing.T, proxy, target string, user *url.Userinfo) *http.Response {
	t.Helper()
	resp, err := proxyClient(proxy, user).Get(target)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestAuthRotation(t *testing.T) {
	upstream, _ := recordingServer(t, false)
	authFile := filepath.Join(t.TempDir(), "auth")
	if err := WriteAuthFile(authFile, "crawler", "old"); err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, Config{AuthFile: authFile})
	status := func(user, pass string) int {
		t.Helper()
		resp, err := proxyClient(proxy, url.UserPassword(user, pass)).Get(upstream.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status("crawler", "old"); s != 200 {
		t.Fatalf("old password before rotation: %d", s)
	}
	if err := WriteAuthFile(authFile, "crawler2", "new"); err != nil {
		t.Fatal(err)
	}
	if s := status("crawler", "old"); s != 407 {
		t.Errorf("old credential after rotation: %d, want 407", s)
	}
	if s := status("crawler2", "new"); s != 200 {
		t.Errorf("new credential after rotation: %d, want 200", s)
	}

	// A broken or missing file fails closed, and a good one brings the proxy back.
	if err := os.WriteFile(authFile, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s := status("crawler2", "new"); s != 407 {
		t.Errorf("corrupt file: %d, want 407", s)
	}
	os.Remove(authFile)
	if s := status("crawler2", "new"); s != 407 {
		t.Errorf("missing file: %d, want 407", s)
	}
	if err := WriteAuthFile(authFile, "crawler3", "newer"); err != nil {
		t.Fatal(err)
	}
	if s := status("crawler3", "newer"); s != 200 {
		t.Errorf("restored file: %d, want 200", s)
	}
}

func TestWriteAuthFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth")
	if err := WriteAuthFile(path, "u", "p"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), ":p\n") || !strings.HasPrefix(string(data), "u:sha256:") {
		t.Errorf("content %q", data)
	}
	c, err := parseAuthFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.check("u", "p", time.Time{}) != nil || c.check("u", "q", time.Time{}) == nil || c.check("v", "p", time.Time{}) == nil {
		t.Error("match is wrong")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	for _, bad := range []string{"", "a:b", "x\ny"} {
		if err := WriteAuthFile(path, bad, "p"); err == nil {
			t.Errorf("username %q accepted", bad)
		}
	}
}

func TestParseAuthFileRejects(t *testing.T) {
	good := "u:sha256:00ff:" + strings.Repeat("ab", 32)
	if _, err := parseAuthFile([]byte(good + "\n")); err != nil {
		t.Fatalf("good line rejected: %v", err)
	}
	for _, bad := range []string{
		"",
		"\n",
		good + "\n" + good,
		":sha256:00ff:" + strings.Repeat("ab", 32),
		"u:md5:00ff:" + strings.Repeat("ab", 32),
		"u:sha256:zz:" + strings.Repeat("ab", 32),
		"u:sha256::" + strings.Repeat("ab", 32),
		"u:sha256:00ff:abcd",
		"u:sha256:00ff",
		"u:sha256:00ff:" + strings.Repeat("ab", 32) + ":extra",
	} {
		if _, err := parseAuthFile([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		} else if strings.Contains(err.Error(), strings.Repeat("ab", 32)) {
			t.Errorf("error quotes the content: %v", err)
		}
	}
}

func TestParseBasic(t *testing.T) {
	for header, want := range map[string][3]string{
		"Basic dTpwOnE=": {"u", "p:q", "ok"},
		"basic dTpwOnE=": {"u", "p:q", "ok"},
		"Bearer x":       {"", "", ""},
		"Basic !!!":      {"", "", ""},
		"Basic dQ==":     {"", "", ""}, // "u", no colon
		"":               {"", "", ""},
	} {
		u, p, ok := parseBasic(header)
		if ok != (want[2] == "ok") || (ok && (u != want[0] || p != want[1])) {
			t.Errorf("parseBasic(%q) = %q %q %v", header, u, p, ok)
		}
	}
}
