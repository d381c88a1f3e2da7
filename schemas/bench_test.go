package schemas

import "testing"

// BenchmarkParseProxySpec is the cost of one parse of a typical spec: what each role that
// follows proxies pays once per change (they parse at their watch, not per decision).
func BenchmarkParseProxySpec(b *testing.B) {
	doc := []byte(`{"provider":"local","maxLeases":4,"attributes":{"geo":"de","tier":"dc"},
		"auth":{"username":"u","password":"p"},"healthCheck":{"intervalSeconds":30,"timeoutSeconds":5},
		"placement":{"zone":"h1"},"pool":"web"}`)
	if _, err := ParseProxySpec(doc); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseProxySpec(doc); err != nil {
			b.Fatal(err)
		}
	}
}
