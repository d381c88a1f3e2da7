package events

import (
	"hash/fnv"
	"strconv"
)

// Lease slots are spread over shard buckets so that a node's crash, which stalls the writes
// of the streams it leads for a Raft election (DESIGN §5.8), stalls only the proxies of one
// shard. Shard 0 keeps the name of the single bucket of earlier installations, so those keep
// working with one shard.

// LeaseBucket is the name of lease shard i: proxy_leases, proxy_leases_1, proxy_leases_2, …
// Its stream is KV_<name>, so every shard's stream starts with KV_proxy_leases.
func LeaseBucket(i int) string {
	if i == 0 {
		return BucketLeases
	}
	return BucketLeases + "_" + strconv.Itoa(i)
}

// LeaseShard is the shard of proxy's slots among n: a stable hash of the name (FNV-1a), so
// every process agrees on it without asking anyone.
func LeaseShard(proxy string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(proxy))
	return int(h.Sum32() % uint32(n))
}

// MaxSlot bounds slot numbers to what a spec allows (maxLeases ≤ 10,000): slots 0–9999.
const MaxSlot = 10000

// SlotKey is the key of a lease slot in its shard of proxy_leases: <proxy>.<slot>. It is the
// one home of the format; every reader splits keys with ParseSlotKey.
func SlotKey(proxy string, slot int) string { return proxy + "." + strconv.Itoa(slot) }

// ParseSlotKey splits a slot key into proxy and slot. The proxy part holds no dot (names are
// DNS-1123 labels; callers that must check the whole name use schemas.ValidName) and the slot
// is canonical, so one slot has exactly one key.
func ParseSlotKey(key string) (proxy string, slot int, ok bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '.' {
			proxy = key[:i]
			slot, ok = ParseSlot(key[i+1:])
			return proxy, slot, ok && proxy != ""
		}
	}
	return "", 0, false
}

// ParseSlot parses a canonical slot number: digits only, no leading zero, below MaxSlot.
func ParseSlot(s string) (int, bool) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n < MaxSlot
}
