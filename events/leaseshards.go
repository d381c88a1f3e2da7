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
