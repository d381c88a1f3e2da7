package schemas

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
)

// checkKeys walks the first JSON value of data against the json tags of t and reports, with
// its full path, the first key that is not a field (matching case exactly), a key repeated in
// one object, or a null. Syntax and type errors are left to encoding/json, which reports them
// first; where the document and t disagree on a type the walk just skips the value.
func checkKeys(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // a number too big for float64 is not this walk's business
	return walkKeys(dec, t, "")
}

func walkKeys(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return nil
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case nil:
		if t != nil {
			return &FieldError{Field: pathOrDocument(path), Problem: "must not be null (leave the field out to get its default)"}
		}
	case json.Delim('['):
		for dec.More() {
			if err := walkKeys(dec, nil, path); err != nil {
				return err
			}
		}
		_, _ = dec.Token()
	case json.Delim('{'):
		seen := make(map[string]bool)
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil
			}
			key, _ := tok.(string)
			p := key
			if path != "" {
				p = path + "." + key
			}
			if seen[key] {
				return &FieldError{Field: p, Problem: "appears more than once"}
			}
			seen[key] = true
			var ft reflect.Type
			if t != nil {
				switch t.Kind() {
				case reflect.Struct:
					var ok bool
					if ft, ok = jsonField(t, key); !ok {
						return &FieldError{Field: p, Problem: "unknown field"}
					}
				case reflect.Map:
					ft = t.Elem()
				}
			}
			if err := walkKeys(dec, ft, p); err != nil {
				return err
			}
		}
		_, _ = dec.Token()
	}
	return nil
}

// jsonField returns the type of the field of struct t whose json name is exactly key.
func jsonField(t reflect.Type, key string) (reflect.Type, bool) {
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f.Type, true
		}
	}
	return nil, false
}

func pathOrDocument(path string) string {
	if path == "" {
		return document
	}
	return path
}
