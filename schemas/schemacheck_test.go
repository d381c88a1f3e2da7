package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"sync"
	"testing"
	"unicode/utf8"
)

// schemaAccepts evaluates the JSON Schema keywords proxyspec.v1.json and poolspec.v1.json use,
// so that tests can hold the schemas and the parsers to the same verdicts without a dependency.
// It fails the test on a keyword it does not know: a schema that grows must grow this too.
// A "$ref" names a schema of this package by its "$id" (schemaByID).
func schemaAccepts(t testing.TB, schema any, doc []byte) bool {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("schemaAccepts needs one JSON value: %v", err)
	}
	ok, err := evalSchema(schema, v)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

var annotations = []string{"$schema", "$id", "$comment", "title", "description", "examples"}

func evalSchema(schema, v any) (bool, error) {
	switch s := schema.(type) {
	case bool:
		return s, nil
	case map[string]any:
		for kw, arg := range s {
			if slices.Contains(annotations, kw) || kw == "then" || kw == "else" {
				continue
			}
			ok, err := evalKeyword(s, kw, arg, v)
			if err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	}
	return false, fmt.Errorf("schema is a %T", schema)
}

func evalKeyword(s map[string]any, kw string, arg, v any) (bool, error) {
	obj, isObj := v.(map[string]any)
	str, isStr := v.(string)
	num, isNum := v.(json.Number)
	switch kw {
	case "type":
		return hasType(arg.(string), v), nil
	case "const":
		return jsonEqual(arg, v), nil
	case "enum":
		return slices.ContainsFunc(arg.([]any), func(e any) bool { return jsonEqual(e, v) }), nil
	case "minimum", "maximum":
		if !isNum {
			return true, nil
		}
		c := rat(num).Cmp(rat(arg.(json.Number)))
		return (kw == "minimum" && c >= 0) || (kw == "maximum" && c <= 0), nil
	case "minLength", "maxLength":
		if !isStr {
			return true, nil
		}
		n, _ := arg.(json.Number).Int64()
		l := int64(utf8.RuneCountInString(str))
		return (kw == "minLength" && l >= n) || (kw == "maxLength" && l <= n), nil
	case "pattern":
		return !isStr || regexp.MustCompile(arg.(string)).MatchString(str), nil
	case "required":
		for _, name := range arg.([]any) {
			if _, ok := obj[name.(string)]; isObj && !ok {
				return false, nil
			}
		}
		return true, nil
	case "properties", "additionalProperties", "propertyNames":
		if !isObj {
			return true, nil
		}
		props, _ := s["properties"].(map[string]any)
		for name, val := range obj {
			var sub any
			switch {
			case kw == "propertyNames":
				sub, val = arg, name
			case kw == "properties" && props[name] != nil:
				sub = props[name]
			case kw == "additionalProperties" && props[name] == nil:
				sub = arg
			default:
				continue
			}
			if ok, err := evalSchema(sub, val); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	case "not":
		ok, err := evalSchema(arg, v)
		return !ok, err
	case "anyOf":
		for _, sub := range arg.([]any) {
			if ok, err := evalSchema(sub, v); err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	case "$ref":
		ref, ok := schemaByID.Load(arg.(string))
		if !ok {
			return false, fmt.Errorf("schemaAccepts cannot resolve $ref %q: only the $id of a schema of this package", arg)
		}
		return evalSchema(ref, v)
	case "items":
		arr, _ := v.([]any)
		for _, e := range arr {
			if ok, err := evalSchema(arg, e); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	case "minItems", "maxItems":
		arr, isArr := v.([]any)
		if !isArr {
			return true, nil
		}
		n, _ := arg.(json.Number).Int64()
		return (kw == "minItems" && int64(len(arr)) >= n) || (kw == "maxItems" && int64(len(arr)) <= n), nil
	case "uniqueItems":
		arr, _ := v.([]any)
		for i := range arr {
			for j := range i {
				if arg == true && jsonEqual(arr[i], arr[j]) {
					return false, nil
				}
			}
		}
		return true, nil
	case "if":
		ok, err := evalSchema(arg, v)
		if err != nil {
			return false, err
		}
		branch, found := s["else"]
		if ok {
			branch, found = s["then"]
		}
		if !found {
			return true, nil
		}
		return evalSchema(branch, v)
	}
	return false, fmt.Errorf("schemaAccepts does not know the keyword %q", kw)
}

func hasType(name string, v any) bool {
	switch v := v.(type) {
	case map[string]any:
		return name == "object"
	case []any:
		return name == "array"
	case string:
		return name == "string"
	case bool:
		return name == "boolean"
	case nil:
		return name == "null"
	case json.Number:
		return name == "number" || (name == "integer" && rat(v).IsInt())
	}
	return false
}

func jsonEqual(a, b any) bool {
	an, aok := a.(json.Number)
	bn, bok := b.(json.Number)
	if aok && bok {
		return rat(an).Cmp(rat(bn)) == 0
	}
	if aok || bok {
		return false
	}
	aj, _ := json.Marshal(a)
	bj, _ := json.Marshal(b)
	return bytes.Equal(aj, bj)
}

func rat(n json.Number) *big.Rat {
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		panic("not a number: " + n)
	}
	return r
}

// schemaByID holds the schemas of this package by their "$id", for "$ref" (id → schema).
var schemaByID sync.Map

func loadSchema(t testing.TB) map[string]any {
	return decodeSchema(t, "proxyspec.v1.json", ProxySpecSchema())
}

// loadPoolSchema loads poolspec.v1.json, and proxyspec.v1.json for its template's "$ref".
func loadPoolSchema(t testing.TB) map[string]any {
	loadSchema(t)
	return decodeSchema(t, "poolspec.v1.json", PoolSpecSchema())
}

func decodeSchema(t testing.TB, name string, data []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var s map[string]any
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	id, _ := s["$id"].(string)
	schemaByID.Store(id, s)
	return s
}
