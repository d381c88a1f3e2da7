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

// BenchmarkDecodeStrictAcquire is the strict decode of a typical acquire request, which the
// leaser does for every acquire (and alike for every release): the decode itself and the walk
// over its keys.
func BenchmarkDecodeStrictAcquire(b *testing.B) {
	doc := []byte(`{"selector":{"geo":"de"},"target":"example.com","ttlSeconds":60,"holder":"crawler-7","requestId":"9f1c2b7e-4d2a-4a57-9a6f-1e0f6c3d2b11"}`)
	var v acquireShape
	if err := DecodeStrict(doc, &v); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		v = acquireShape{}
		if err := DecodeStrict(doc, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// acquireShape has the fields of events.AcquireRequest that the document above uses, and a few
// it does not, as the walk meets them (schemas imports no events).
type acquireShape struct {
	Selector       map[string]string `json:"selector,omitempty"`
	Target         string            `json:"target,omitempty"`
	TTLSeconds     int               `json:"ttlSeconds,omitempty"`
	Holder         string            `json:"holder,omitempty"`
	Sticky         string            `json:"sticky,omitempty"`
	SessionSeconds int               `json:"sessionSeconds,omitempty"`
	WaitSeconds    int               `json:"waitSeconds,omitempty"`
	MinAnonymity   string            `json:"minAnonymity,omitempty"`
	Strategy       string            `json:"strategy,omitempty"`
	RequestID      string            `json:"requestId,omitempty"`
}
