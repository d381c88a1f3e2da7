package forwardproxy

import (
	"encoding/json"
	"maps"
	"testing"
)

// FuzzReadRefusals: a refusals file either decodes, and then encodes back to the same counts,
// or is refused; nothing panics. (The local provider skips a file that does not decode.)
func FuzzReadRefusals(f *testing.F) {
	f.Add([]byte(`{"v":1,"refused":{"revoked":3,"instance":1}}` + "\n"))
	f.Add([]byte(`{"v":1,"refused":null}`))
	f.Add([]byte(`{"v":1,"refused":{"revoked":-1}}`))
	f.Add([]byte(`{"refused":{"x":1e30}}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ReadRefusals(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("decoded counts do not encode: %v", err)
		}
		back, err := ReadRefusals(b)
		if err != nil || back.V != r.V || !maps.Equal(back.Refused, r.Refused) {
			t.Fatalf("counts do not round-trip: %v", err)
		}
	})
}
