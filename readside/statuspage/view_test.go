package statuspage

import (
	"testing"
	"time"
)

// An event's time is shown in the page's time zone, with the date when it is of another day
// there, whatever offset the process that wrote it had.
func TestEventClockIsInThePagesZone(t *testing.T) {
	now := time.Date(2026, time.March, 4, 0, 30, 0, 0, time.UTC)
	east := time.FixedZone("UTC+14", 14*3600)
	west := time.FixedZone("UTC-12", -12*3600)
	for _, c := range []struct {
		name string
		at   time.Time
		want string
	}{
		{"same day, UTC", now.Add(-20 * time.Minute), "00:10:00"},
		{"same day, written at +14", now.Add(-20 * time.Minute).In(east), "00:10:00"},
		{"the day before", now.Add(-time.Hour), "2026-03-03 23:30:00"},
		// 11:30 on 3 March at -12 is 23:30 UTC: the day before on the page.
		{"the day before, written at -12", now.Add(-time.Hour).In(west), "2026-03-03 23:30:00"},
		// 14:10 on 4 March at +14 is the page's 00:10: today, not a date.
		{"today, written at +14 on another calendar hour", time.Date(2026, time.March, 4, 14, 10, 0, 0, east), "00:10:00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newView(Snapshot{GeneratedAt: now, Events: []EventRow{{At: c.at}}})
			if got := v.Events[0].Clock; got != c.want {
				t.Errorf("clock %q, want %q", got, c.want)
			}
		})
	}
}
