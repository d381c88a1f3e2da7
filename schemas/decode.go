package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
)

// document names the whole input in a FieldError.
const document = "(document)"

// DecodeStrict decodes data into v (a pointer to a struct) as strictly as ParseProxySpec
// decodes a spec, for the other JSON documents users send (the lease service's requests):
// unknown or miscased fields, null, repeated keys and trailing data are rejected. Its error is
// a *FieldError naming the field at fault, or "(document)" for the whole input, or several
// of them joined.
func DecodeStrict(data []byte, v any) error { return decodeStrict(data, v) }

func decodeStrict(data []byte, v any) error {
	errs, _ := decodeAll(data, v)
	return errors.Join(errs...)
}

// decodeAll decodes the first JSON value of data into v (a pointer to a struct), holds it to
// what the JSON Schema says, and returns every problem found. encoding/json alone is laxer:
// it matches keys without regard to case, takes null for any field, lets a repeated key win
// silently, accepts a stray '}' or ']' after the value, and names an unknown key without its
// path. rest says v holds the document all the same, but for the fields named (the problems
// are unknown or repeated keys, nulls, trailing data: not broken JSON, nor a value of the
// wrong type), so a validation of v can add the problems of the other fields, and a user
// fixes every mistake in one round.
func decodeAll(data []byte, v any) (errs []error, rest bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	unknownFirst := isUnknownField(err)
	if unknownFirst {
		// encoding/json keeps only its first error: decoded again without the rule (checkKeys
		// names every unknown key), a wrong type behind the unknown key is found too.
		dec = json.NewDecoder(bytes.NewReader(data))
		if err = dec.Decode(v); err == nil {
			err = errUnknownOnly
		}
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return []error{decodeError(data, err)}, false
	}
	rest = true
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil, err == errUnknownOnly:
	case errors.As(err, &typeErr) && typeErr.Field != "":
		// encoding/json goes on past a field of the wrong type, so the rest is decoded; but
		// what the field meant is unknown, and the checks that depend on it would guess.
		errs, rest = append(errs, decodeError(data, err)), false
	default:
		return []error{decodeError(data, err)}, false
	}
	keys := checkKeys(data, reflect.TypeOf(v).Elem())
	if unknownFirst {
		// In the order encoding/json met them, so the first error is what it was before.
		errs = append(keys, errs...)
	} else {
		errs = append(errs, keys...)
	}
	if err == errUnknownOnly && len(errs) == 0 {
		// checkKeys finds every key encoding/json rejects; this is only a fallback.
		return []error{&FieldError{Field: document, Problem: "has an unknown field"}}, false
	}
	if _, err := dec.Token(); err != io.EOF {
		errs = append(errs, &FieldError{Field: document, Problem: "trailing data after the JSON object"})
	}
	return errs, rest
}

// errUnknownOnly marks a document whose only decoding error was an unknown field.
var errUnknownOnly = errors.New("unknown field")

// parseAll is decodeAll, then validate on what was decoded (its defaults applied): every
// problem, each field named once. A validation error about a field a decoding error already
// names (or one inside it, or around it) is left out: "port: must be an integer" says it,
// and "replicas: must not be null" needs no "replicas: is required".
func parseAll(data []byte, v any, validate func() error) error {
	errs, rest := decodeAll(data, v)
	if !rest {
		return errors.Join(errs...)
	}
	named := make([]string, 0, len(errs))
	for _, e := range errs {
		var fe *FieldError
		if errors.As(e, &fe) {
			named = append(named, fe.Field)
		}
	}
	for _, e := range unjoin(validate()) {
		var fe *FieldError
		if e == nil || errors.As(e, &fe) && slices.ContainsFunc(named, func(n string) bool { return related(n, fe.Field) }) {
			continue
		}
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

// related says two fields are one, or one holds the other; "(document)" holds every field.
func related(a, b string) bool {
	inside := func(x, y string) bool {
		return x == y || y == document || strings.HasPrefix(x, y+".") || strings.HasPrefix(x, y+"[")
	}
	return inside(a, b) || inside(b, a)
}

// isUnknownField is the one place that reads encoding/json's error text: the error for an
// unknown field has no type of its own. decode_test.go pins the text, so a Go release that
// changes it fails a test instead of turning unknown fields into "(document)" errors.
func isUnknownField(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "json: unknown field ")
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
