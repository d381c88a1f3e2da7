package proxmox

import (
	"strings"
	"testing"
	"time"
)

func TestMarksRoundTrip(t *testing.T) {
	m := marks{Managed: true, UID: "u-1", Installation: "inst", CreatedAt: time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC),
		Provider: "pve", Port: 3128, Proxy: "crawl\n1"}
	d := m.description()
	if strings.Count(d, "\n") != 7 || !strings.Contains(d, "egressd-proxy=crawl 1\n") {
		t.Errorf("description %q", d)
	}
	back, found := parseMarks(d)
	m.Proxy = "crawl 1"
	if !found || back != m {
		t.Errorf("read back %+v, want %+v", back, m)
	}
	// Human notes around the lines, CRLF, padding: tolerated; the values are trimmed.
	back, found = parseMarks("my notes\r\negressd-managed=true\r\n egressd-uid =  u-1 \r\nother=1\r\negressd-created-at=garbage\r\n")
	if !found || !back.Managed || back.UID != "u-1" || !back.CreatedAt.IsZero() {
		t.Errorf("tolerant parse: %+v %v", back, found)
	}
	if _, found := parseMarks("just a VM a human made\nowner=bob\n"); found {
		t.Error("marks found in a description without them")
	}
}

func FuzzParseMarks(f *testing.F) {
	f.Add(marks{Managed: true, UID: "u", Port: 1}.description())
	f.Add("egressd-port=99999999999999999999\negressd-uid=\x00")
	f.Fuzz(func(t *testing.T, s string) {
		m, _ := parseMarks(s)
		if m.UID != strings.TrimSpace(m.UID) {
			t.Errorf("untrimmed UID %q", m.UID)
		}
	})
}

// The lifetime's end is a line of its own, written only with a lifetime and read back in
// whole seconds; one that does not parse reads as no lifetime (decision 0076).
func TestLifetimeMark(t *testing.T) {
	at := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		desc string
		want time.Time
	}{
		{"written", marks{Managed: true, UID: "u", CreatedAt: at, ExpiresAt: at.Add(20 * time.Second)}.description(), at.Add(20 * time.Second)},
		{"none", marks{Managed: true, UID: "u", CreatedAt: at}.description(), time.Time{}},
		{"garbled", "egressd-managed=true\negressd-uid=u\negressd-expires-at=soon\n", time.Time{}},
		{"padded", "egressd-managed=true\negressd-uid=u\n egressd-expires-at = 2026-12-03T07:00:20Z \n", at.Add(20 * time.Second)},
	} {
		m, _ := parseMarks(c.desc)
		if got := m.contract().ExpiresAt; !got.Equal(c.want) {
			t.Errorf("%s: expiresAt %v, want %v (description %q)", c.name, got, c.want, c.desc)
		}
	}
	if d := (marks{Managed: true, UID: "u", CreatedAt: at}).description(); strings.Contains(d, markExpiresAt) {
		t.Errorf("a VM without a lifetime has the line: %q", d)
	}
}
