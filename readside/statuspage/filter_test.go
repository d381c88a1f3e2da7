package statuspage

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
)

func TestJSONFiltersAndPages(t *testing.T) {
	r := newRig(t)
	r.seedFleet(t)
	h := r.handler(t, Config{})
	for _, c := range []struct {
		query   string
		names   string
		matches int
		page    string // page/pages
	}{
		{"", "bad-spec broken-1 crawl-eu-1 crawl-eu-2 crawl-eu-3 crawl-us-1 ext-office", 7, "1/1"},
		{"?phase=Ready", "crawl-eu-1 ext-office", 2, "1/1"},
		{"?phase=ready,Failed&phase=Invalid", "bad-spec broken-1 crawl-eu-1 ext-office", 4, "1/1"},
		{"?provider=kvm-home", "broken-1 crawl-us-1", 2, "1/1"},
		{"?provider=external", "ext-office", 1, "1/1"},
		{"?selector=region=eu", "crawl-eu-1 crawl-eu-2", 2, "1/1"},
		{"?selector=region=eu,pool=crawl", "crawl-eu-1", 1, "1/1"},
		{"?q=eu-", "crawl-eu-1 crawl-eu-2 crawl-eu-3", 3, "1/1"},
		{"?pool=crawl", "crawl-eu-1 crawl-eu-2", 2, "1/1"},
		{"?pool=crawl&phase=Unhealthy", "crawl-eu-2", 1, "1/1"},
		{"?pool=batch", "", 0, "1/1"},
		{"?per_page=3", "bad-spec broken-1 crawl-eu-1", 7, "1/3"},
		{"?per_page=3&page=3", "ext-office", 7, "3/3"},
		{"?per_page=3&page=9", "ext-office", 7, "3/3"}, // past the end: the last page
		{"?q=nosuch", "", 0, "1/1"},
	} {
		t.Run(c.query, func(t *testing.T) {
			res, body := get(t, h, "/api/status.json"+c.query)
			var s Snapshot
			if err := json.Unmarshal([]byte(body), &s); err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("%d %v\n%s", res.StatusCode, err, body)
			}
			var names []string
			for _, p := range s.Proxies {
				names = append(names, p.Name)
				if p.Status != nil {
					t.Errorf("%s carries its full status", p.Name)
				}
			}
			if got := strings.Join(names, " "); got != c.names || s.Paging.Matches != c.matches ||
				fmt.Sprintf("%d/%d", s.Paging.Page, s.Paging.Pages) != c.page {
				t.Errorf("rows %q, %d matches, page %d/%d; want %q, %d, %s", got, s.Paging.Matches, s.Paging.Page, s.Paging.Pages,
					c.names, c.matches, c.page)
			}
			// The totals are the fleet's, whatever the filter.
			if s.Counts.Proxies != 7 || s.Counts.Phases["Ready"] != 2 {
				t.Errorf("counts changed with the filter: %+v", s.Counts)
			}
			if s.Proxies == nil {
				t.Error("proxies is null, want []")
			}
		})
	}
}

func TestBadFilterIsAClearError(t *testing.T) {
	r := newRig(t)
	r.seedFleet(t)
	h := r.handler(t, Config{})
	for _, c := range []struct{ query, want string }{
		{"?phase=Redy", `phase "Redy": not a phase; one of Pending`},
		{"?selector=region", `selector "region": want key=value with a key`},
		{"?page=0", `page "0": want a whole number from 1`},
		{"?per_page=5000", `per_page "5000": want a whole number from 1 to 1000`},
	} {
		res, body := get(t, h, "/api/status.json"+c.query)
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || res.StatusCode != http.StatusBadRequest || !strings.HasPrefix(e.Error, c.want) {
			t.Errorf("%s: %d %q, want 400 and %q", c.query, res.StatusCode, body, c.want)
		}
		res, body = get(t, h, "/"+c.query)
		text := visibleText(body)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(text, "The filter is not valid "+c.want) ||
			!strings.Contains(text, "Fix the filter above.") {
			t.Errorf("page %s: %d\n%s", c.query, res.StatusCode, text)
		}
	}
}

func TestPageLinksKeepTheFilter(t *testing.T) {
	r := newRig(t)
	r.seedFleet(t)
	h := r.handler(t, Config{})
	res, body := get(t, h, "/?provider=local,kvm-home&q=crawl&per_page=2&page=2")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	text := visibleText(body)
	for _, want := range []string{
		"Proxies 3–4 of 4 matching, 7 in all.", "page 2 of 2", "Previous page", "Clear the filter",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("page lacks %q:\n%s", want, text)
		}
	}
	if rows := tableRows(t, body, "proxies"); len(rows) != 2 || !strings.HasPrefix(rows[0], "crawl-eu-3") || !strings.HasPrefix(rows[1], "crawl-us-1") {
		t.Errorf("rows %q", rows)
	}
	for _, want := range []string{
		// The previous page and the phase links keep the filter and the page size.
		`href="?per_page=2&amp;provider=local%2Ckvm-home&amp;q=crawl" rel="prev"`,
		`href="?per_page=2&amp;phase=Ready&amp;provider=local%2Ckvm-home&amp;q=crawl"`,
		// The form shows the filter, and keeps the page size.
		`name="provider" value="local,kvm-home"`, `name="q" value="crawl"`, `<input type="hidden" name="per_page" value="2">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(body, `rel="next"`) {
		t.Error("the last page links to a next one")
	}
	// A filter that matches nothing says so, rather than "no proxies yet".
	_, body = get(t, h, "/?phase="+string(events.PhaseWaiting))
	if text := visibleText(body); !strings.Contains(text, "No proxy matches the filter.") || !strings.Contains(text, "0 of 7 proxies match.") {
		t.Errorf("empty match:\n%s", text)
	}
}
