package schemas

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func FuzzParseProxySpec(f *testing.F) {
	for _, tc := range specCases {
		f.Add([]byte(tc.doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseProxySpec(data)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T %q is not a *FieldError", err, err)
			}
			errorFields(t, err)
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed spec does not validate: %v", err)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseProxySpec(out)
		if err != nil {
			t.Fatalf("re-marshalled spec %s does not parse: %v", out, err)
		}
		if !reflect.DeepEqual(s, again) {
			t.Fatalf("round trip changed the spec:\n%+v\n%+v\nvia %s", s, again, out)
		}
	})
}
