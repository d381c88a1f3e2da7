package gcp

import (
	"strconv"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
)

// The lifetime's end is a label written with the creation mark and read back from it; a
// label that does not parse reads as no lifetime (decision 0076).
func TestLifetimeLabel(t *testing.T) {
	at := time.Date(2026, 12, 3, 7, 0, 0, 123e6, time.UTC)
	p := &Provider{name: "g", now: func() time.Time { return at }}
	l := p.labels(providers.CreateRequest{UID: "u", Installation: "i", Port: 3128, Lifetime: 20 * time.Second}, "")
	if got := marksOf(l); !got.CreatedAt.Equal(at) || !got.ExpiresAt.Equal(at.Add(20*time.Second)) {
		t.Errorf("marks %+v, want created %v, expires 20 s later", got, at)
	}
	if l := p.labels(providers.CreateRequest{UID: "u", Installation: "i", Port: 3128}, ""); l[labelExpiresAt] != "" {
		t.Errorf("a request without a lifetime wrote %s=%q", labelExpiresAt, l[labelExpiresAt])
	}
	for _, c := range []struct {
		value string
		want  time.Time
	}{
		{strconv.FormatInt(at.UnixMilli(), 10), at},
		{"", time.Time{}},
		{"garbage", time.Time{}},
		{"0", time.Time{}},
		{"-5", time.Time{}},
	} {
		got := marksOf(map[string]string{labelManaged: "true", labelExpiresAt: c.value}).ExpiresAt
		if !got.Equal(c.want) {
			t.Errorf("%s=%q reads as %v, want %v", labelExpiresAt, c.value, got, c.want)
		}
	}
}
