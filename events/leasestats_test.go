package events

import "testing"

func TestRawLeaseEventModes(t *testing.T) {
	reasons := []Reason{ReasonGranted, ReasonRenewed, ReasonReleased, ReasonExpired, ReasonProxyDeleted, ReasonProxyReplaced}
	want := map[RawLeaseEvents][]bool{
		RawAll:     {true, true, true, true, true, true},
		RawEnds:    {false, false, true, true, true, true},
		"":         {false, false, true, true, true, true}, // the default is RawEnds
		RawReports: {false, false, false, false, false, false},
	}
	for mode, w := range want {
		for i, r := range reasons {
			if got := mode.Publishes(r); got != w[i] {
				t.Errorf("mode %q publishes %s: %v, want %v", mode, r, got, w[i])
			}
		}
	}
}

func TestLeaseCounts(t *testing.T) {
	var c LeaseCounts
	for _, r := range []Reason{ReasonGranted, ReasonGranted, ReasonRenewed, ReasonReleased, ReasonExpired, ReasonProxyDeleted, ReasonProxyReplaced} {
		if !c.CountLease(r) {
			t.Errorf("%s not counted", r)
		}
	}
	if c.CountLease("bogus") || c.CountReport("bogus") {
		t.Error("a reason that is none counted")
	}
	for _, r := range []ReportResult{ReportOK, ReportBlocked, ReportBlocked, ReportFailed} {
		c.CountReport(r)
	}
	want := LeaseCounts{Granted: 2, Renewed: 1, Released: 1, Expired: 1, Ended: 2, OK: 1, Blocked: 2, Failed: 1}
	if c != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	if c.Reports() != 4 || c.BlockRate() != 0.5 || (LeaseCounts{}).BlockRate() != 0 {
		t.Errorf("reports %d, block rate %v", c.Reports(), c.BlockRate())
	}
	sum := want
	sum.Add(want)
	if sum.Granted != 4 || sum.Failed != 2 || sum.Ended != 4 {
		t.Errorf("add: %+v", sum)
	}
}
