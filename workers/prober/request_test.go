package prober

import (
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
)

func TestDecodeRequest(t *testing.T) {
	subj := events.ProbeSubject("local", "h1", "p1")
	for _, tc := range []struct {
		name, subject, body, err string
	}{
		{"valid", subj, `{"v":1,"proxy":"p1","provider":"local","host":"h1","address":"127.0.0.2","port":3128}`, ""},
		{"not JSON", subj, `{`, "decode"},
		{"another version", subj, `{"v":2,"proxy":"p1","provider":"local","host":"h1","address":"127.0.0.2","port":3128}`, "version"},
		{"bad name", subj, `{"v":1,"proxy":"P 1","provider":"local","host":"h1","address":"127.0.0.2","port":3128}`, "valid name"},
		{"address with a path", subj, `{"v":1,"proxy":"p1","provider":"local","host":"h1","address":"a/b","port":3128}`, "not a host"},
		{"port out of range", subj, `{"v":1,"proxy":"p1","provider":"local","host":"h1","address":"127.0.0.2","port":70000}`, "out of range"},
		{"subject disagrees", events.ProbeSubject("other", "h1", "p1"), `{"v":1,"proxy":"p1","provider":"local","host":"h1","address":"127.0.0.2","port":3128}`, "differ"},
	} {
		_, err := decodeRequest(tc.subject, []byte(tc.body))
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
		}
	}
}

// A probe-now request from the network never panics the prober, and one it accepts names a
// valid proxy on the subject it came on.
func FuzzDecodeProbeRequest(f *testing.F) {
	f.Add(events.ProbeSubject("local", "h1", "p1"), []byte(`{"v":1,"proxy":"p1","provider":"local","host":"h1","address":"127.0.0.2","port":3128}`))
	f.Add("egress.probe.a.b.c", []byte(`{"v":1,"proxy":"c","provider":"a","host":"b","address":"::1","port":1}`))
	f.Add("x", []byte(`[]`))
	f.Fuzz(func(t *testing.T, subject string, body []byte) {
		req, err := decodeRequest(subject, body)
		if err != nil {
			return
		}
		if subject != events.ProbeSubject(req.Provider, req.Host, req.Proxy) || req.Port < 1 || req.Port > 65535 {
			t.Fatalf("accepted %+v on %q", req, subject)
		}
	})
}
