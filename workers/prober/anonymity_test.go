package prober

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

func TestJudge(t *testing.T) {
	client := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		name    string
		headers map[string][]string
		client  netip.Addr
		leaked  []string
		want    events.Anonymity
	}{
		{"nothing added", map[string][]string{"User-Agent": {"egressd-prober/1"}, "Accept": {"*/*"}}, client, nil, events.AnonymityElite},
		{"stock squid", map[string][]string{"Via": {"1.1 vm (squid/5.7)"}, "X-Forwarded-For": {"10.0.0.1"}}, client,
			[]string{"Via", "X-Forwarded-For"}, events.AnonymityTransparent},
		{"squid forwarded_for off", map[string][]string{"Via": {"1.1 vm (squid/5.7)"}, "X-Forwarded-For": {"unknown"}}, client,
			[]string{"Via", "X-Forwarded-For"}, events.AnonymityAnonymous},
		{"another proxy's address in the chain", map[string][]string{"X-Forwarded-For": {"192.0.2.9, 198.51.100.1"}}, client,
			[]string{"X-Forwarded-For"}, events.AnonymityAnonymous},
		{"the client last in a chain", map[string][]string{"X-Forwarded-For": {"192.0.2.9, 10.0.0.1"}}, client,
			[]string{"X-Forwarded-For"}, events.AnonymityTransparent},
		{"Forwarded with a bracketed v6-mapped address and port", map[string][]string{"Forwarded": {`for="[::ffff:10.0.0.1]:4711";proto=http`}}, client,
			[]string{"Forwarded"}, events.AnonymityTransparent},
		{"an address with a port", map[string][]string{"Client-Ip": {"10.0.0.1:5555"}}, client, []string{"Client-Ip"}, events.AnonymityTransparent},
		{"an unnamed header carrying the client", map[string][]string{"X-Originating-Ip": {"[10.0.0.1]"}}, client,
			[]string{"X-Originating-Ip"}, events.AnonymityTransparent},
		{"a lower-case name from another echo service", map[string][]string{"x-real-ip": {"10.0.0.1"}, "x-client": {"10.0.0.1"}}, client,
			[]string{"X-Real-Ip", "X-Client"}, events.AnonymityTransparent},
		{"a longer address is not the client", map[string][]string{"X-Seen": {"10.0.0.12", "110.0.0.1"}}, client, nil, events.AnonymityElite},
		{"the Host names the site, not the client", map[string][]string{"Host": {"10.0.0.1:8080"}}, client, nil, events.AnonymityElite},
		{"a forwarded credential reveals a proxy", map[string][]string{"Proxy-Authorization": {"[redacted]"}}, client,
			[]string{"Proxy-Authorization"}, events.AnonymityAnonymous},
		{"proxy identifiers", map[string][]string{"X-Proxy-Id": {"1234"}}, client, []string{"X-Proxy-Id"}, events.AnonymityAnonymous},
		{"no client address known", map[string][]string{"X-Forwarded-For": {"10.0.0.1"}}, netip.Addr{},
			[]string{"X-Forwarded-For"}, events.AnonymityAnonymous},
		{"a v4-mapped client", map[string][]string{"X-Seen": {"10.0.0.1"}}, netip.MustParseAddr("::ffff:10.0.0.1"),
			[]string{"X-Seen"}, events.AnonymityTransparent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaked, got := EchoReply{V: 1, IP: "203.0.113.1", Headers: tc.headers}.judge(tc.client)
			if got != tc.want || !slices.Equal(leaked, tc.leaked) {
				t.Errorf("got %s %q, want %s %q", got, leaked, tc.want, tc.leaked)
			}
		})
	}
}

func TestVerdict(t *testing.T) {
	elite := events.PathCheck{Path: events.PathConnect, EgressIP: "198.51.100.1", Anonymity: events.AnonymityElite}
	transparent := events.PathCheck{Path: events.PathForward, EgressIP: "198.51.100.1", Anonymity: events.AnonymityTransparent,
		Leaked: []string{"Via", "X-Forwarded-For"}}
	anonymous := events.PathCheck{Path: events.PathConnect, Anonymity: events.AnonymityAnonymous, Leaked: []string{"Via", "X-Proxy-Id"}}
	failed := events.PathCheck{Path: events.PathForward, Error: "dial proxy: connection refused"}
	for _, tc := range []struct {
		name     string
		paths    []events.PathCheck
		want     events.Anonymity
		leaked   []string
		complete bool
	}{
		{"both elite", []events.PathCheck{elite, {Path: events.PathForward, Anonymity: events.AnonymityElite}}, events.AnonymityElite, nil, true},
		{"the least of both", []events.PathCheck{elite, transparent}, events.AnonymityTransparent, []string{"Via", "X-Forwarded-For"}, true},
		{"leaks in union", []events.PathCheck{anonymous, transparent}, events.AnonymityTransparent, []string{"Via", "X-Proxy-Id", "X-Forwarded-For"}, true},
		{"a failed path", []events.PathCheck{elite, failed}, events.AnonymityElite, nil, false},
		{"a custom check URL is no failure", []events.PathCheck{{Path: events.PathConnect, Error: errNotEcho}, transparent},
			events.AnonymityTransparent, []string{"Via", "X-Forwarded-For"}, true},
		{"no forward endpoint is no failure", []events.PathCheck{elite, {Path: events.PathForward, Error: errNoForward}},
			events.AnonymityElite, nil, true},
		{"nothing", []events.PathCheck{{Path: events.PathConnect, Error: "refused"}, failed}, "", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, leaked, complete := verdict(tc.paths)
			if got != tc.want || !slices.Equal(leaked, tc.leaked) || complete != tc.complete {
				t.Errorf("got %q %q %v, want %q %q %v", got, leaked, complete, tc.want, tc.leaked, tc.complete)
			}
		})
	}
}

// The record's verdict over a sequence of probes: a path that failed once neither clears a
// leak nor flaps the verdict, a leak seen on one path counts at once, a change between two
// known verdicts is announced.
func TestNextHealthAnonymity(t *testing.T) {
	elite := pathResult{echo: true, egressIP: "198.51.100.1", anonymity: events.AnonymityElite}
	leaky := pathResult{echo: true, egressIP: "198.51.100.1", anonymity: events.AnonymityTransparent, leaked: []string{"Via", "X-Forwarded-For"}}
	down := pathResult{err: errors.New("dial proxy: connection refused")}
	probe := func(connect, forward pathResult) result { return result{pathResult: connect, forward: &forward} }
	steps := []struct {
		name      string
		res       result
		want      events.Anonymity
		leaked    []string
		announced bool
	}{
		{"first verdict, not announced", probe(elite, leaky), events.AnonymityTransparent, []string{"Via", "X-Forwarded-For"}, false},
		{"the forward path fails once: the leak stays", probe(elite, down), events.AnonymityTransparent, []string{"Via", "X-Forwarded-For"}, false},
		{"fixed on both paths", probe(elite, elite), events.AnonymityElite, nil, true},
		{"down: the last verdict stays", probe(down, down), events.AnonymityElite, nil, false},
		{"a leak on one path while the other fails counts", probe(down, leaky), events.AnonymityTransparent, []string{"Via", "X-Forwarded-For"}, true},
		{"steady", probe(elite, leaky), events.AnonymityTransparent, []string{"Via", "X-Forwarded-For"}, false},
	}
	var prev *events.ProxyHealth
	for i, s := range steps {
		o := observation{proxy: "p1", address: "10.0.0.5:3128", at: time.Unix(int64(i+1), 0), check: specCheck(10, 3, 1),
			expected: "198.51.100.1", res: s.res}
		h, ch := nextHealth(prev, o)
		if h.Anonymity != s.want || !slices.Equal(h.LeakedHeaders, s.leaked) || ch.anonymity != s.announced {
			t.Fatalf("%s: %s %q announced %v, want %s %q %v", s.name, h.Anonymity, h.LeakedHeaders, ch.anonymity, s.want, s.leaked, s.announced)
		}
		if ch.anonymity && ch.was != prev.Anonymity {
			t.Errorf("%s: was %s, the record said %s", s.name, ch.was, prev.Anonymity)
		}
		if len(h.Paths) != 2 || h.Paths[0].Path != events.PathConnect || h.Paths[1].Path != events.PathForward || h.ExpectedEgress != "198.51.100.1" {
			t.Errorf("%s: paths %+v expected %q", s.name, h.Paths, h.ExpectedEgress)
		}
		if prev != nil && len(prev.LeakedHeaders) > 0 && len(h.LeakedHeaders) > 0 && &prev.LeakedHeaders[0] == &h.LeakedHeaders[0] && s.res.err == nil {
			t.Errorf("%s: the record shares its leaked headers with the previous one", s.name)
		}
		prev = &h
	}
}

func TestMentions(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::7")
	for _, tc := range []struct {
		value string
		addr  netip.Addr
		want  bool
	}{
		{"192.0.2.7", v4, true},
		{"for=192.0.2.7;by=203.0.113.1", v4, true},
		{"192.0.2.70", v4, false},
		{"1.192.0.2.7", v4, false},
		{`for="[2001:db8::7]:80"`, v6, true},
		{"2001:db8::7", v6, true},
		{"2001:db8::70", v6, false},
		{"", v4, false},
		{"1.1 vm (squid/5.7)", v4, false},
	} {
		if got := mentions(tc.value, tc.addr); got != tc.want {
			t.Errorf("mentions(%q, %s) = %v", tc.value, tc.addr, got)
		}
	}
}
