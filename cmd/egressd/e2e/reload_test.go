package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testcert"
	"github.com/egressd/egressd/workers/leaser"
)

// SIGHUP applies a changed config to the running egressd: a crawler's token added to
// leaseHTTP.crawlers gets in and a removed one gets 401, a renewed certificate is served, a
// config that does not load changes nothing, and a changed provider is reported as waiting for
// a restart. The process lives through every SIGHUP. No proxy is needed: with the fleet empty a
// known token gets 503 (nothing free) and an unknown one 401.
func TestReloadOnSIGHUP(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	certs := func(name string) (testcert.Files, *x509.CertPool) {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		f, err := testcert.Write(d)
		if err != nil {
			t.Fatal(err)
		}
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		return f, pool
	}
	first, firstCA := certs("first")
	second, secondCA := certs("second")
	live := testcert.Files{Cert: filepath.Join(dir, "live.pem"), Key: filepath.Join(dir, "live-key.pem")}
	install := func(f testcert.Files) {
		for src, dst := range map[string]string{f.Cert: live.Cert, f.Key: live.Key} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(first)
	const tokenA, tokenB = "egt_SENTINEL_reload_a_0000000000000000", "egt_SENTINEL_reload_b_0000000000000000"
	cfgPath := filepath.Join(dir, "egressd.yaml")
	writeCfg := func(addresses string, tokens ...string) {
		s := "providers:\n  - name: local\n    type: local\n    local:\n      addresses: [" + addresses + "]\nleaseHTTP:\n  crawlers:\n"
		for i, tok := range tokens {
			sum := leaser.TokenHash(tok)
			s += "    - name: crawler-" + string(rune('a'+i)) + "\n      tokenSHA256: " + hex.EncodeToString(sum[:]) + "\n"
		}
		if err := os.WriteFile(cfgPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg("127.0.96.2-127.0.96.9", tokenA)
	addr := freeAddr(t)
	n := startNode(t, dir, "--config", cfgPath, "--lease-http-listen", addr, "--lease-http-tls-cert", live.Cert, "--lease-http-tls-key", live.Key)

	status := func(pool *x509.CertPool, token string) (int, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		req, _ := http.NewRequest(http.MethodPost, "https://"+addr+leaser.HTTPPathPrefix+"acquire", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	expect := func(what string, pool *x509.CertPool, token string, want int) {
		t.Helper()
		waitUntil(t, what, 15*time.Second, func() (bool, string) {
			code, err := status(pool, token)
			return err == nil && code == want, strings.TrimSpace(strings.Join([]string{http.StatusText(code), errText(err)}, " "))
		})
	}
	hup := func() {
		t.Helper()
		if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	expect("token A let in", firstCA, tokenA, http.StatusServiceUnavailable)
	expect("token B refused", firstCA, tokenB, http.StatusUnauthorized)

	writeCfg("127.0.96.2-127.0.96.9", tokenB)
	install(second)
	hup()
	expect("token B let in after SIGHUP, on the renewed certificate", secondCA, tokenB, http.StatusServiceUnavailable)
	expect("token A revoked", secondCA, tokenA, http.StatusUnauthorized)
	if _, err := status(firstCA, tokenB); err == nil {
		t.Error("the old certificate is still served")
	}

	// A config that does not load is refused whole: B still gets in.
	if err := os.WriteFile(cfgPath, []byte("providers: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hup()
	waitUntil(t, "the refusal logged", 15*time.Second, func() (bool, string) {
		return strings.Contains(n.logs(), "reload: config refused"), ""
	})
	expect("token B kept after a bad config", secondCA, tokenB, http.StatusServiceUnavailable)

	// A provider change waits for a restart, and says so; the crawlers still apply.
	writeCfg("127.0.96.2-127.0.96.20", tokenA, tokenB)
	hup()
	expect("token A back", secondCA, tokenA, http.StatusServiceUnavailable)
	waitUntil(t, "the pending restart logged", 15*time.Second, func() (bool, string) {
		return strings.Contains(n.logs(), `parts=[providers]`), ""
	})
	select {
	case <-n.exited:
		t.Fatalf("egressd exited on SIGHUP:\n%s", n.logs())
	default:
	}
	if strings.Contains(n.logs(), "SENTINEL") {
		t.Error("a token is in the log")
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
