package kubernetes

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/providers"
)

// The lifetime's end is an annotation beside the creation mark, written only with a
// lifetime and read back exact; one that does not parse reads as no lifetime (decision 0076).
func TestLifetimeAnnotation(t *testing.T) {
	at := time.Date(2026, 12, 3, 7, 0, 0, 123456789, time.UTC)
	p := &Provider{name: "k"}
	req := providers.CreateRequest{Name: "egress-x", UID: "u", Installation: "i", Lifetime: 20 * time.Second}
	m := p.meta(plan{req: req}, at)
	if got := marksOf(m); !got.CreatedAt.Equal(at) || !got.ExpiresAt.Equal(at.Add(20*time.Second)) {
		t.Errorf("marks %+v, want created %v and expires 20 s later", got, at)
	}
	req.Lifetime = 0
	if m := p.meta(plan{req: req}, at); m.Annotations[annotExpiresAt] != "" {
		t.Errorf("no lifetime, yet %s=%q", annotExpiresAt, m.Annotations[annotExpiresAt])
	}
	for _, c := range []struct {
		value string
		want  time.Time
	}{
		{"2026-12-03T07:00:20.123456789Z", at.Add(20 * time.Second)},
		{"soon", time.Time{}},
		{"", time.Time{}},
	} {
		om := metav1.ObjectMeta{Labels: map[string]string{labelManaged: "true"}, Annotations: map[string]string{annotExpiresAt: c.value}}
		if got := marksOf(om).ExpiresAt; !got.Equal(c.want) {
			t.Errorf("%s=%q reads as %v, want %v", annotExpiresAt, c.value, got, c.want)
		}
	}
}
