package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Boots land in egress_proxy_boot_seconds by provider, zone and image.
func TestObserveBoot(t *testing.T) {
	_, m := seed(t)
	m.ObserveBoot("gcp", "europe-west1-b", "debian-13", 42*time.Second)
	m.ObserveBoot("gcp", "europe-west1-b", "debian-13", 3*time.Second)
	m.ObserveBoot("local", "local", "", 700*time.Millisecond)
	want := `
# HELP egress_proxy_boot_seconds Time from a proxy's spec to its first Ready, by provider, zone (the provider target it landed on) and image; observed by the reconciler leader.
# TYPE egress_proxy_boot_seconds histogram
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want+`egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="0.5"} 0
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="1"} 0
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="2"} 0
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="5"} 1
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="10"} 1
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="20"} 1
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="30"} 1
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="45"} 2
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="60"} 2
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="90"} 2
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="120"} 2
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="180"} 2
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="300"} 2
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="600"} 2
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="1200"} 2
egress_proxy_boot_seconds_bucket{image="debian-13",provider="gcp",zone="europe-west1-b",le="+Inf"} 2
egress_proxy_boot_seconds_sum{image="debian-13",provider="gcp",zone="europe-west1-b"} 45
egress_proxy_boot_seconds_count{image="debian-13",provider="gcp",zone="europe-west1-b"} 2
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="0.5"} 0
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="1"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="2"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="5"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="10"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="20"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="30"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="45"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="60"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="90"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="120"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="180"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="300"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="600"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="1200"} 1
egress_proxy_boot_seconds_bucket{image="",provider="local",zone="local",le="+Inf"} 1
egress_proxy_boot_seconds_sum{image="",provider="local",zone="local"} 0.7
egress_proxy_boot_seconds_count{image="",provider="local",zone="local"} 1
`), "egress_proxy_boot_seconds"); err != nil {
		t.Fatal(err)
	}
}
