package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// document names the whole input in a FieldError.
const document = "(document)"

// DecodeStrict decodes data into v (a pointer to a struct) as strictly as ParseProxySpec
// decodes a spec, for the other JSON documents users send (the lease service's requests):
// unknown or miscased fields, null, repeated keys and trailing data are rejected. Its error is
// a *FieldError naming the field at fault, or "(document)" for the whole input.
func DecodeStrict(data []byte, v any) error { return decodeStrict(data, v) }

// decodeStrict decodes the first JSON value of data into v (a pointer to a struct) and holds
// it to what the JSON Schema says. encoding/json alone is laxer: it matches keys without
// regard to case, takes null for any field, lets a repeated key win silently, accepts a
// stray '}' or ']' after the value, and names an unknown key without its path.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err != nil && !isUnknownField(err) {
		return decodeError(data, err)
	}
	if kerr := checkKeys(data, reflect.TypeOf(v).Elem()); kerr != nil {
		return kerr
	}
	if err != nil {
		return decodeError(data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &FieldError{Field: document, Problem: "trailing data after the JSON object"}
	}
	return nil
}

// isUnknownField is the one place that reads encoding/json's error text: the error for an
// unknown field has no type of its own. decode_test.go pins the text, so a Go release that
// changes it fails a test instead of turning unknown fields into "(document)" errors.
func isUnknownField(err error) bool {
	return strings.HasPrefix(err.Error(), "json: unknown field ")
}

// decodeError turns encoding/json's errors in decoding data into FieldErrors naming the field.
// It never quotes a value: a number given for a password would otherwise be echoed back.
func decodeError(data []byte, err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		got, lit, _ := strings.Cut(typeErr.Value, " ")
		if field != "" {
			// encoding/json leaves out array indices: "placements.provider".
			field = locateValue(data, field, got, lit)
		}
		if field == "" {
			field = document
		}
		return &FieldError{Field: field, Problem: fmt.Sprintf("must be %s, not a JSON %s", jsonKind(typeErr.Type.Kind()), got)}
	case errors.As(err, &syntaxErr):
		return &FieldError{Field: document, Problem: fmt.Sprintf("invalid JSON at byte %d: %v", syntaxErr.Offset, err)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &FieldError{Field: document, Problem: "empty or truncated JSON"}
	case isUnknownField(err):
		// checkKeys finds every key encoding/json rejects; this is only a fallback.
		return &FieldError{Field: document, Problem: "has an unknown field"}
	}
	return &FieldError{Field: document, Problem: err.Error()}
}

func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "an object"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "a " + k.String()
}
