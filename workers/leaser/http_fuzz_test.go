package leaser

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/egressd/egressd/events"
)

// FuzzHTTPAcquireHolder feeds arbitrary acquire bodies to what the service does with an HTTP
// acquire of an authenticated crawler (the token check is httpface's FuzzHTTPFaceInput): the
// body either comes out naming the token's crawler as holder (and decodes as the service
// would decode it, with the Idempotency-Key header, if any, as its requestId) or is a 400
// naming a field. None panics.
func FuzzHTTPAcquireHolder(f *testing.F) {
	for _, s := range []string{`{}`, `{"holder":"crawler-a"}`, `{"holder":"x"}`, `{"holder":null}`, `{"target":"a","target":"a"}`, `[`,
		`{"requestId":"k1"}`, `{"requestId":"k2"}`} {
		f.Add([]byte(s), "")
		f.Add([]byte(s), "k1")
	}
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		var keys []string
		if key != "" {
			keys = []string{key}
		}
		out, err := withHolder(body, "crawler-a", keys)
		var ae *apiError
		if err != nil {
			if !errors.As(err, &ae) || ae.code != events.CodeBadRequest || ae.field == "" {
				t.Fatalf("%q: %v", body, err)
			}
			return
		}
		var req events.AcquireRequest
		if err := decode(out, &req); err != nil || req.Holder != "crawler-a" {
			t.Fatalf("%q became %s (%v)", body, out, err)
		}
		var again events.AcquireRequest
		_ = json.Unmarshal(body, &again)
		if again.Holder != "" && again.Holder != "crawler-a" {
			t.Fatalf("%q named holder %q and was let through", body, again.Holder)
		}
		if key != "" && req.RequestID != key {
			t.Fatalf("%q with %s %q: requestId %q", body, events.IdempotencyKeyHeader, key, req.RequestID)
		}
	})
}
