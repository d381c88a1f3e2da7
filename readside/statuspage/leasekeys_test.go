package statuspage

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// The page and /api/status.json say the lease master rotation each provider's provisioner
// reports and how many of its proxies hold each master; a provider without a report (it
// delivers no keys to running proxies) is not listed.
func TestLeaseKeysOnThePage(t *testing.T) {
	r := newRig(t)
	r.put(t, r.store.Catalog, "local", events.CatalogRecord{V: 1, Provider: "local", Type: "local"})
	r.put(t, r.store.Catalog, "gcp-eu", events.CatalogRecord{V: 1, Provider: "gcp-eu", Type: "gcp"})
	r.put(t, r.store.Locks, events.LeaseKeysKey("local"), events.LeaseKeysReport{V: 1, Provider: "local", At: time.Now(),
		Phase: "spreading", Masters: []string{"OldOld11", "NewNew22"}, Proxies: []events.ProxyLeaseKeys{
			{Proxy: "a", Generation: "g1", Instance: "a-1", KeyIDs: []string{"OldOld11", "NewNew22"}},
			{Proxy: "b", Generation: "g2", Instance: "b-1", KeyIDs: []string{"OldOld11"}}}})
	h := r.handler(t, Config{})
	res, doc := get(t, h, "/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("page: %d", res.StatusCode)
	}
	rows := tableRows(t, doc, "leasekeys")
	if len(rows) != 1 {
		t.Fatalf("lease keys rows: %q", rows)
	}
	row := rowOf(t, rows, "local")
	for _, want := range []string{"spreading", "OldOld11: 2 of 2", "NewNew22: 1 of 2"} {
		if !strings.Contains(row, want) {
			t.Errorf("the row lacks %q: %s", want, row)
		}
	}
	_, body := get(t, h, "/api/status.json")
	var s struct{ LeaseKeys []events.LeaseKeysReport }
	if err := json.Unmarshal([]byte(body), &s); err != nil || len(s.LeaseKeys) != 1 || s.LeaseKeys[0].Provider != "local" ||
		len(s.LeaseKeys[0].Proxies) != 2 {
		t.Errorf("status.json: %v %s", err, body)
	}
}
