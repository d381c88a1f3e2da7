// Package selection is the lease service's pure selection core: what one replica knows of the
// fleet, and which proxies an acquire should try, in which order. It does no I/O and knows
// nothing of NATS or KV: the shell (package leaser) turns KV entries into the typed updates of
// Fleet (SetSpec, SetStatus, SetHealth, SetCooling, SlotHeld, SlotFreed, SetPoolCap) and reads
// ranked candidates back (Next, SessionCandidate) or the numbers of a refusal (Availability).
//
// Where things are:
//   - order.go decides the lease order: who is eligible, the sticky preference, each
//     strategy's order, the refusal counts and how equals are spread after a lost race. Its
//     doc comment states the order; change the order there and nowhere else.
//   - fleet.go is the state and its updates; proxy.go what is known of one proxy.
//   - index.go and ranked.go make the order cheap (DESIGN §5.8): per selector a set of the
//     eligible proxies kept sorted as the updates come in, so an acquire reads the few best
//     entries instead of sorting the fleet. They decide nothing: select_property_test.go checks
//     that they always give what sorting every eligible proxy by the rules of order.go gives.
//
// Only the commit of a lease is exact, and it is the shell's (an atomic Create of a slot key):
// a Fleet may lag behind the server in either direction, which costs a retry, never an extra
// lease. A Fleet is safe for concurrent use.
package selection
