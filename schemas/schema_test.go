package schemas

import (
	"encoding/json"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestProxySpecSchemaDeclaresItself(t *testing.T) {
	s := loadSchema(t)
	if s["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v, want draft 2020-12", s["$schema"])
	}
	id, _ := s["$id"].(string)
	if u, err := url.Parse(id); err != nil || !u.IsAbs() || !strings.HasSuffix(id, "/proxyspec.v1.json") {
		t.Errorf("$id = %q, want an absolute URL ending in /proxyspec.v1.json", id)
	}
	b := ProxySpecSchema()
	b[0] = 'x'
	if ProxySpecSchema()[0] != '{' {
		t.Error("ProxySpecSchema hands out the embedded bytes themselves")
	}
}

func TestSchemaExamplesParse(t *testing.T) {
	for i, ex := range loadSchema(t)["examples"].([]any) {
		doc, _ := json.Marshal(ex)
		if _, err := ParseProxySpec(doc); err != nil {
			t.Errorf("example %d: %v", i, err)
		}
	}
}

// TestSchemaMatchesGoTypes fails on a field that the Go types and the schema do not both
// have, with the same JSON type, and on an object that lets unknown fields through.
func TestSchemaMatchesGoTypes(t *testing.T) {
	want := map[string]string{}
	goFields(reflect.TypeFor[ProxySpec](), "", want)
	s := loadSchema(t)
	got := map[string]string{}
	schemaFields(t, s, "", got)
	for path, typ := range want {
		if gotTyp, ok := got[path]; !ok {
			t.Errorf("%s: in the Go types, not in the schema", path)
		} else if gotTyp != typ {
			t.Errorf("%s: Go has type %s, the schema %q", path, typ, gotTyp)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("%s: in the schema, not in the Go types", path)
		}
	}
	// A misspelt name in a conditional would silently never apply.
	for _, kw := range []string{"if", "then", "else"} {
		for _, path := range mentionedFields(s[kw], "") {
			if _, ok := want[path]; !ok {
				t.Errorf("%s mentions %s, which the Go types do not have", kw, path)
			}
		}
	}
}

func goFields(t reflect.Type, prefix string, out map[string]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		path := prefix + name
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch ft.Kind() {
		case reflect.Struct:
			out[path] = "object"
			goFields(ft, path+".", out)
		case reflect.Map:
			out[path] = "object"
			out[path+".*"] = jsonTypeOf(ft.Elem().Kind())
		default:
			out[path] = jsonTypeOf(ft.Kind())
		}
	}
}

func jsonTypeOf(k reflect.Kind) string {
	switch k {
	case reflect.Int:
		return "integer"
	case reflect.String:
		return "string"
	}
	return "unsupported Go kind " + k.String()
}

func schemaFields(t *testing.T, node map[string]any, prefix string, out map[string]string) {
	props, _ := node["properties"].(map[string]any)
	if props != nil && node["additionalProperties"] != false {
		t.Errorf("%q: additionalProperties is not false", strings.TrimSuffix(prefix, "."))
	}
	if extra, ok := node["additionalProperties"].(map[string]any); ok {
		out[prefix+"*"], _ = extra["type"].(string)
	}
	for name, p := range props {
		sub := p.(map[string]any)
		out[prefix+name], _ = sub["type"].(string)
		schemaFields(t, sub, prefix+name+".", out)
	}
}

// mentionedFields lists the paths of the fields a subschema names in properties or required.
func mentionedFields(node any, prefix string) []string {
	m, _ := node.(map[string]any)
	var paths []string
	required, _ := m["required"].([]any)
	for _, name := range required {
		paths = append(paths, prefix+name.(string))
	}
	props, _ := m["properties"].(map[string]any)
	for name, sub := range props {
		paths = append(paths, prefix+name)
		paths = append(paths, mentionedFields(sub, prefix+name+".")...)
	}
	if not, ok := m["not"]; ok {
		paths = append(paths, mentionedFields(not, prefix)...)
	}
	return slices.Compact(slices.Sorted(slices.Values(paths)))
}

// TestSchemaAgreesWithParser holds the schema and ParseProxySpec to the same verdict on every
// table case the schema can judge.
func TestSchemaAgreesWithParser(t *testing.T) {
	s := loadSchema(t)
	judged := 0
	for _, tc := range specCases {
		if tc.schemaGap || !json.Valid([]byte(tc.doc)) {
			continue
		}
		judged++
		if got, want := schemaAccepts(t, s, []byte(tc.doc)), tc.fields == nil; got != want {
			t.Errorf("%s: schema accepts=%v, ParseProxySpec accepts=%v", tc.name, got, want)
		}
	}
	if judged < len(specCases)/2 {
		t.Errorf("only %d of %d cases judged", judged, len(specCases))
	}
}
