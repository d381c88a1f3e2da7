package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// TestUnknownFieldAdapter pins the encoding/json error text isUnknownField reads. If a Go
// release changes it, this fails rather than every unknown field silently losing its path.
func TestUnknownFieldAdapter(t *testing.T) {
	decode := func(doc string) error {
		var v struct {
			A int `json:"a"`
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
		dec.DisallowUnknownFields()
		return dec.Decode(&v)
	}
	if err := decode(`{"b":1}`); err == nil || !isUnknownField(err) {
		t.Fatalf("encoding/json's unknown-field error %v is not recognised", err)
	}
	for _, doc := range []string{`{"a":"x"}`, `{"a":}`, ``, `{"a"`} {
		if err := decode(doc); err == nil || isUnknownField(err) {
			t.Errorf("%q: error %v taken for an unknown field", doc, err)
		}
	}
}

func TestDecodeErrorFallback(t *testing.T) {
	// Reached only if checkKeys and encoding/json ever disagree on what is unknown.
	err := decodeError(nil, errors.New(`json: unknown field "zz"`))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != document {
		t.Fatalf("got %v", err)
	}
}
