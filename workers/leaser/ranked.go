package leaser

import (
	"cmp"
	"math/rand/v2"
	"time"
)

// rank is where a proxy stands in the selection order of DESIGN §3.5 below the sticky
// preference, which depends on the request and is applied on top: fewest active leases,
// least recently leased, lowest probe latency (unknown last), name.
type rank struct {
	active     int
	lastLeased time.Time
	latencyMs  float64 // 0: unknown
	name       string
}

func (a rank) compare(b rank) int {
	if c := a.tie(b); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// tie compares everything but the name: candidates it finds equal are equally good, which
// is where concurrent replicas should spread rather than all take the first by name.
func (a rank) tie(b rank) int {
	if c := cmp.Compare(a.active, b.active); c != 0 {
		return c
	}
	if c := a.lastLeased.Compare(b.lastLeased); c != 0 {
		return c
	}
	if (a.latencyMs == 0) != (b.latencyMs == 0) {
		if a.latencyMs == 0 {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.latencyMs, b.latencyMs)
}

// ranked is an ordered set of proxies by rank: a treap, so insert, delete and finding the
// first entry after a rank cost O(log n) expected with nothing to rebalance by hand. It is
// what lets an acquire read the few best candidates instead of sorting the fleet.
type ranked struct {
	root *rankNode
}

type rankNode struct {
	key         rank
	p           *proxyView
	prio        uint64
	left, right *rankNode
}

// insert adds p at key; key must not be in the set.
func (t *ranked) insert(key rank, p *proxyView) {
	t.root = insertNode(t.root, &rankNode{key: key, p: p, prio: rand.Uint64()})
}

func insertNode(root, n *rankNode) *rankNode {
	if root == nil {
		return n
	}
	if n.prio > root.prio {
		n.left, n.right = split(root, n.key)
		return n
	}
	if n.key.compare(root.key) < 0 {
		root.left = insertNode(root.left, n)
	} else {
		root.right = insertNode(root.right, n)
	}
	return root
}

// split cuts t into the keys below k and the keys above it (k itself is not in t).
func split(t *rankNode, k rank) (lo, hi *rankNode) {
	if t == nil {
		return nil, nil
	}
	if t.key.compare(k) < 0 {
		t.right, hi = split(t.right, k)
		return t, hi
	}
	lo, t.left = split(t.left, k)
	return lo, t
}

func merge(lo, hi *rankNode) *rankNode {
	switch {
	case lo == nil:
		return hi
	case hi == nil:
		return lo
	case lo.prio > hi.prio:
		lo.right = merge(lo.right, hi)
		return lo
	default:
		hi.left = merge(lo, hi.left)
		return hi
	}
}

// delete removes key, reporting whether it was there.
func (t *ranked) delete(key rank) bool {
	link := &t.root
	for n := *link; n != nil; n = *link {
		switch c := key.compare(n.key); {
		case c < 0:
			link = &n.left
		case c > 0:
			link = &n.right
		default:
			*link = merge(n.left, n.right)
			return true
		}
	}
	return false
}

// ascend calls f on the entries in order, starting after key when after is set (from the
// first entry otherwise), until f returns false.
func (t *ranked) ascend(after *rank, f func(rank, *proxyView) bool) {
	ascendNode(t.root, after, f)
}

func ascendNode(n *rankNode, after *rank, f func(rank, *proxyView) bool) bool {
	for n != nil {
		if after != nil && n.key.compare(*after) <= 0 {
			n = n.right // n and its left subtree are not after the cursor
			continue
		}
		if !ascendNode(n.left, after, f) || !f(n.key, n.p) {
			return false
		}
		// Everything to the right is after the cursor.
		after, n = nil, n.right
	}
	return true
}
