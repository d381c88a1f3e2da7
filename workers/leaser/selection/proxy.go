package selection

import (
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// proxyView is what the fleet knows of one proxy. Fields are grouped by the bucket that feeds
// them; a proxy missing from a bucket has that group's zero value.
type proxyView struct {
	name string
	// proxies
	hasSpec   bool
	attrs     map[string]string
	maxLeases int
	creds     schemas.InstanceAuth // the auth its current instance carries (decision 87)
	external  bool
	drain     bool   // "drain": true: never granted again, held leases renew and run on
	origin    Origin // provider and pool, for the lease statistics and holder caps
	placement schemas.Placement
	specRev   uint64 // of the newest entry of the proxy's key, a delete included
	specGone  bool   // that entry is a delete or purge
	// proxy_status
	hasStatus bool
	phase     events.Phase
	ip        string
	port      int
	provider  string
	host      string
	statusRev uint64
	instance  string        // events.ProxyStatus.Incarnation
	gen       string        // events.ProxyStatus.Generation: what lease tokens name
	teardown  events.Reason // why the instance must go (replaced, recreated, deleted); "" while it stays
	retiring  []string      // incarnations of the retiring instances, which serve their leases on (decision 98)
	addressAt time.Time
	expected  string // events.ProxyStatus.ExpectedEgress
	// proxy_health
	latencyMs float64            // 0: unknown
	health    events.ProxyHealth // what the anonymity verdict needs of the record: address, probe time, verdict
	// proxy_leases
	slots      map[int]Slot
	held       int // slots below maxLeases
	lastLeased time.Time
	// proxy_cooldowns: targets cooling down, "" for every target
	cooling map[string]bool
	coolEnd map[string]time.Time // when a target's cooldown ends, where known (nextAllowedAt)
	hood    string               // its neighbourhood, when the fleet has one set ("": none)

	ix indexed // how the selection index accounts for it
}

// Slot is a held slot: the lease record and the revision it was read or written at (0 when
// the record is not the server's).
type Slot struct {
	Rev   uint64
	Lease events.Lease
}

// Origin is what the lease statistics and the holder caps carry of a proxy besides its name.
type Origin struct{ Provider, Pool string }

// Endpoint is where a lease's holder connects, and what a probe checks.
type Endpoint struct {
	IP       string
	Port     int
	Auth     *schemas.Auth
	Provider string
	Host     string
	// Generation names the proxy's current instance in its lease tokens
	// (events.ProxyStatus.Generation).
	Generation string
	// Egress is where the proxy's traffic leaves from, for the lease reply.
	Egress events.LeaseEgress
}

// Basis is what a grant is made against: the revisions of the proxy's spec and status and
// its instance, as the fleet knows them (events.Lease records them).
type Basis struct {
	SpecRev, StatusRev uint64
	Instance           string
}

// Heard is what the fleet last heard of a proxy's spec and status, for the shell to tell
// whether a lease granted earlier outlived its proxy (leftovers.go).
type Heard struct {
	SpecRev   uint64 // of the newest entry of the proxy's key, a delete included; 0: none seen
	SpecGone  bool   // that entry is a delete or purge
	HasStatus bool
	StatusRev uint64
	Instance  string
	Teardown  events.Reason
	// Retiring are the incarnations of the proxy's retiring instances: replaced successor
	// first, each serves the leases granted on it until they end (decision 98).
	Retiring []string
}

// setSlot records a held slot, keeping held.
func (p *proxyView) setSlot(slot int, st Slot) {
	if _, was := p.slots[slot]; !was && slot < p.maxLeases {
		p.held++
	}
	p.slots[slot] = st
}

// dropSlot forgets a held slot, keeping held.
func (p *proxyView) dropSlot(slot int) (Slot, bool) {
	old, was := p.slots[slot]
	if was {
		delete(p.slots, slot)
		if slot < p.maxLeases {
			p.held--
		}
	}
	return old, was
}

// endpoint is p's address, credentials and probe routing. Callers hold mu.
func (p *proxyView) endpoint() Endpoint {
	auth, _ := p.creds.Auth() // unknown: never leased (leasable), so never handed out
	e := Endpoint{IP: p.ip, Port: p.port, Auth: auth, Provider: p.provider, Host: p.host, Generation: p.gen}
	if p.external {
		e.Provider, e.Host = events.External, events.External
	}
	e.Egress = events.LeaseEgress{Address: p.expected, Provider: e.Provider, Target: e.Host,
		Region: p.placement.Region, Zone: p.placement.Zone, Pool: p.origin.Pool, Attributes: p.attrs}
	// A probe of the instance's predecessor (another address) says nothing of this one.
	if p.health.EgressIP != "" && p.health.Address == net.JoinHostPort(p.ip, strconv.Itoa(p.port)) {
		e.Egress.Address, e.Egress.Observed = p.health.EgressIP, true
	}
	return e
}

func (p *proxyView) basis() Basis {
	return Basis{SpecRev: p.specRev, StatusRev: p.statusRev, Instance: p.instance}
}

func (p *proxyView) heard() Heard {
	return Heard{SpecRev: p.specRev, SpecGone: p.specGone, HasStatus: p.hasStatus, StatusRev: p.statusRev,
		Instance: p.instance, Teardown: p.teardown, Retiring: p.retiring}
}

// anonymity is the probers' verdict on the proxy's current instance (events.AnonymityVerdict:
// a record about another address, or a predecessor's at this one, is unknown). Callers hold mu.
func (p *proxyView) anonymity() events.Anonymity {
	if p.ip == "" || p.port <= 0 {
		return ""
	}
	// Staleness is left to the record's TTL, as for the phase the reconciler derives.
	return p.health.AnonymityVerdict(net.JoinHostPort(p.ip, strconv.Itoa(p.port)), p.addressAt, 0, time.Time{})
}

// hasFreeSlot reports whether a slot below maxLeases is free; slots held above a shrunk
// maxLeases do not count, and maxLeases 0 has none.
func hasFreeSlot(p *proxyView) bool { return p.maxLeases-p.held > 0 }

// SlotsPerCandidate bounds the Creates one acquire spends on one proxy: if that many slots the
// fleet thought free are taken, it is far behind and the next proxy is a better bet.
const SlotsPerCandidate = 8

// freeSlots returns up to limit free slots of p in random order, so that replicas racing for
// one proxy spread over its slots. Its cost does not grow with maxLeases (up to 10,000) while
// a quarter of the slots are free.
func freeSlots(p *proxyView, limit int) []int {
	return FreeNumbers(p.maxLeases, p.held, func(s int) bool { _, held := p.slots[s]; return held }, limit)
}

// FreeNumbers returns up to limit numbers below max that held does not report, in random
// order (so that replicas racing for them spread), given count, how many below max are held.
// Its cost does not grow with max (up to 10,000) while a quarter of them are free. The shell
// picks holder slots with it too.
func FreeNumbers(max, count int, held func(int) bool, limit int) []int {
	free := max - count
	if free <= 0 {
		return nil
	}
	var out []int
	if max <= 4*limit || 4*free < max {
		for n := range max {
			if !held(n) {
				out = append(out, n)
			}
		}
		rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out[:min(len(out), limit)]
	}
	picked := map[int]bool{}
	for len(out) < min(limit, free) {
		n := rand.IntN(max)
		if !held(n) && !picked[n] {
			picked[n] = true
			out = append(out, n)
		}
	}
	return out
}
