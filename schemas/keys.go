package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// checkKeys walks the first JSON value of data against the json tags of t and reports, with
// its full path (array elements as "placements[1]"), every key that is not a field (matching
// case exactly), key repeated in one object, and null. Syntax and type errors are left to
// encoding/json, which reports them first; where the document and t disagree on a type the
// walk just skips the value.
func checkKeys(data []byte, t reflect.Type) []error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // a number too big for float64 is not this walk's business
	var errs []error
	walkKeys(dec, t, "", func(fe *FieldError) { errs = append(errs, fe) })
	return errs
}

// walkKeys walks one value, reporting each problem. An unknown key's value is walked with no
// type (so only its nulls and repeats inside are not reported: they are part of a field that
// should not be there at all).
func walkKeys(dec *json.Decoder, t reflect.Type, path string, report func(*FieldError)) {
	tok, err := dec.Token()
	if err != nil {
		return
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case nil:
		if t != nil {
			report(&FieldError{Field: pathOrDocument(path), Problem: "must not be null (leave the field out to get its default)"})
		}
	case json.Delim('['):
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			walkKeys(dec, et, fmt.Sprintf("%s[%d]", path, i), report)
		}
		_, _ = dec.Token()
	case json.Delim('{'):
		seen := make(map[string]bool)
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return
			}
			key, _ := tok.(string)
			p := key
			if path != "" {
				p = path + "." + key
			}
			if seen[key] {
				report(&FieldError{Field: p, Problem: "appears more than once"})
			}
			seen[key] = true
			var ft reflect.Type
			if t != nil && !reflect.PointerTo(t).Implements(unmarshaler) {
				// A type with its own JSON (Spares) reports its own problems.
				switch t.Kind() {
				case reflect.Struct:
					var ok bool
					if ft, ok = jsonField(t, key); !ok {
						report(&FieldError{Field: p, Problem: "unknown field"})
					}
				case reflect.Map:
					ft = t.Elem()
				}
			}
			walkKeys(dec, ft, p, report)
		}
		_, _ = dec.Token()
	}
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// jsonField returns the type of the field of struct t whose json name is exactly key.
func jsonField(t reflect.Type, key string) (reflect.Type, bool) {
	ft, ok := jsonFields(t)[key]
	return ft, ok
}

// fieldsOf caches jsonFields by struct type: every request the services decode walks its
// keys (a lease acquire and release, thousands a second), and reading the tags of each
// field again for each key was most of what that walk allocated.
var fieldsOf sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps the json name of each field of struct t to its type. The first field of a
// name wins, as it did when the fields were searched in order.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldsOf.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, seen := m[name]; !seen {
			m[name] = f.Type
		}
	}
	fieldsOf.Store(t, m)
	return m
}

func pathOrDocument(path string) string {
	if path == "" {
		return document
	}
	return path
}

// locateValue is the indexed path ("placements[1].provider") of the first value in data at
// field, a path as encoding/json names it, without array indices ("placements.provider"),
// that is of the JSON kind got ("string", "number", "object", "array", "bool") and, if lit is
// not empty, is the number lit. It is how a type error inside an array gets its element's
// index; field itself when nothing matches.
func locateValue(data []byte, field, got, lit string) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if p, ok := findValue(dec, "", "", field, got, lit); ok {
		return p
	}
	return field
}

func findValue(dec *json.Decoder, indexed, bare, field, got, lit string) (string, bool) {
	tok, err := dec.Token()
	if err != nil {
		return "", false
	}
	var kind string
	switch tok := tok.(type) {
	case json.Delim:
		kind = map[json.Delim]string{'{': "object", '[': "array"}[tok]
	case string:
		kind = "string"
	case json.Number:
		kind = "number"
		if lit != "" && string(tok) != lit {
			kind = "other number"
		}
	case bool:
		kind = "bool"
	}
	if bare == field && kind == got {
		return indexed, true
	}
	switch tok {
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if p, ok := findValue(dec, fmt.Sprintf("%s[%d]", indexed, i), bare, field, got, lit); ok {
				return p, true
			}
		}
		_, _ = dec.Token()
	case json.Delim('{'):
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return "", false
			}
			key, _ := tok.(string)
			ip, bp := key, key
			if indexed != "" {
				ip, bp = indexed+"."+key, bare+"."+key
			}
			if p, ok := findValue(dec, ip, bp, field, got, lit); ok {
				return p, true
			}
		}
		_, _ = dec.Token()
	}
	return "", false
}
