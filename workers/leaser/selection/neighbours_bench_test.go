package selection

import (
	"fmt"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// BenchmarkCrowded is what an acquire that spreads over neighbourhoods (holder and target
// named, leases.neighbours on) adds in the view: a look at every proxy, 10,000 here, with
// the holder holding 10 leases for the target (each /24 has 256 proxies).
func BenchmarkCrowded(b *testing.B) {
	f := NewFleet(0)
	f.SetNeighbourhood(Neighbourhood{V4Bits: 24})
	one := 4
	for i := range 10000 {
		name := fmt.Sprintf("px-%d", i)
		f.SetSpec(name, 1, false, &schemas.ProxySpec{Provider: "local", MaxLeases: &one})
		f.SetStatus(name, 1, events.ProxyStatus{Phase: events.PhaseReady, IP: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), Port: 3128}, true)
		if i%1000 == 0 {
			f.SlotHeld(name, 0, Slot{Rev: 1, Lease: events.Lease{Proxy: name, Holder: "h", Target: "t"}})
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if len(f.Crowded("h", "t")) == 0 {
			b.Fatal("none crowded")
		}
	}
}
