package e2e

import (
	"io"
	"net/http"
	"testing"
)

// The real binary serves the profiles on loopback when asked, and only there.
func TestPprofServedOnLoopback(t *testing.T) {
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 81), "--pprof-listen", "127.0.0.1:0")
	base := pprofURL(t, n)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(body) == 0 {
			t.Fatalf("GET %s: HTTP %d, %d bytes", path, resp.StatusCode, len(body))
		}
	}
}

// pprofURL is where the node says it serves pprof.
func pprofURL(t testing.TB, n *node) string {
	t.Helper()
	return loggedURL(t, n, `msg="serving pprof" .*url=(http://\S+)/debug/pprof/`)
}
