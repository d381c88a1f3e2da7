package selection

import "math/rand/v2"

// ranked is an ordered set of proxies by rank in one order: a treap, so insert, delete and
// finding the first entry after a rank cost O(log n) expected with nothing to rebalance by
// hand. Each node knows its subtree's size, so the n-th entry (a random strategy's start)
// costs the same. It is what lets an acquire read the few best candidates instead of sorting
// the fleet. The zero value is an empty set in the balanced order.
type ranked struct {
	root *rankNode
	by   int // the order: orderBalanced, ...
}

type rankNode struct {
	key         rank
	p           *proxyView
	prio        uint64
	size        int
	left, right *rankNode
}

func (t *ranked) cmp(a, b rank) int { return orderCompare[t.by](a, b) }

func size(n *rankNode) int {
	if n == nil {
		return 0
	}
	return n.size
}

func (n *rankNode) fix() *rankNode {
	n.size = 1 + size(n.left) + size(n.right)
	return n
}

// len is the number of entries.
func (t *ranked) len() int { return size(t.root) }

// insert adds p at key; key must not be in the set.
func (t *ranked) insert(key rank, p *proxyView) {
	t.root = t.insertNode(t.root, &rankNode{key: key, p: p, prio: rand.Uint64(), size: 1})
}

func (t *ranked) insertNode(root, n *rankNode) *rankNode {
	if root == nil {
		return n
	}
	if n.prio > root.prio {
		n.left, n.right = t.split(root, n.key)
		return n.fix()
	}
	if t.cmp(n.key, root.key) < 0 {
		root.left = t.insertNode(root.left, n)
	} else {
		root.right = t.insertNode(root.right, n)
	}
	return root.fix()
}

// split cuts n into the keys below k and the keys above it (k itself is not in n).
func (t *ranked) split(n *rankNode, k rank) (lo, hi *rankNode) {
	if n == nil {
		return nil, nil
	}
	if t.cmp(n.key, k) < 0 {
		n.right, hi = t.split(n.right, k)
		return n.fix(), hi
	}
	lo, n.left = t.split(n.left, k)
	return lo, n.fix()
}

func merge(lo, hi *rankNode) *rankNode {
	switch {
	case lo == nil:
		return hi
	case hi == nil:
		return lo
	case lo.prio > hi.prio:
		lo.right = merge(lo.right, hi)
		return lo.fix()
	default:
		hi.left = merge(lo, hi.left)
		return hi.fix()
	}
}

// delete removes key, reporting whether it was there.
func (t *ranked) delete(key rank) bool {
	var found bool
	t.root, found = t.deleteNode(t.root, key)
	return found
}

func (t *ranked) deleteNode(n *rankNode, key rank) (*rankNode, bool) {
	if n == nil {
		return nil, false
	}
	var found bool
	switch c := t.cmp(key, n.key); {
	case c < 0:
		n.left, found = t.deleteNode(n.left, key)
	case c > 0:
		n.right, found = t.deleteNode(n.right, key)
	default:
		return merge(n.left, n.right), true
	}
	return n.fix(), found
}

// nth returns the key of the i-th entry (from 0); i must be below len.
func (t *ranked) nth(i int) rank {
	n := t.root
	for {
		switch l := size(n.left); {
		case i < l:
			n = n.left
		case i == l:
			return n.key
		default:
			i -= l + 1
			n = n.right
		}
	}
}

// ascend calls f on the entries in order, starting after key when after is set (from the
// first entry otherwise), until f returns false. It reports whether it reached the end.
func (t *ranked) ascend(after *rank, f func(rank, *proxyView) bool) bool {
	return t.ascendNode(t.root, after, f)
}

func (t *ranked) ascendNode(n *rankNode, after *rank, f func(rank, *proxyView) bool) bool {
	for n != nil {
		if after != nil && t.cmp(n.key, *after) <= 0 {
			n = n.right // n and its left subtree are not after the cursor
			continue
		}
		if !t.ascendNode(n.left, after, f) || !f(n.key, n.p) {
			return false
		}
		// Everything to the right is after the cursor.
		after, n = nil, n.right
	}
	return true
}

// descend calls f on the entries in reverse order, starting before key when before is set
// (from the last entry otherwise), until f returns false. It reports whether it reached the
// first entry.
func (t *ranked) descend(before *rank, f func(rank, *proxyView) bool) bool {
	return t.descendNode(t.root, before, f)
}

func (t *ranked) descendNode(n *rankNode, before *rank, f func(rank, *proxyView) bool) bool {
	for n != nil {
		if before != nil && t.cmp(n.key, *before) >= 0 {
			n = n.left // n and its right subtree are not before the cursor
			continue
		}
		if !t.descendNode(n.right, before, f) || !f(n.key, n.p) {
			return false
		}
		// Everything to the left is before the cursor.
		before, n = nil, n.left
	}
	return true
}
