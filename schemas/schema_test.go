package schemas

import (
	"encoding/json"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// schemaDoc is one embedded schema and the Go type it describes.
type schemaDoc struct {
	file   string
	get    func() []byte
	load   func(testing.TB) map[string]any
	goType reflect.Type
	parse  func([]byte) error
	cases  []specCase
}

func schemaDocs() []schemaDoc {
	return []schemaDoc{
		{"proxyspec.v1.json", ProxySpecSchema, loadSchema, reflect.TypeFor[ProxySpec](),
			func(b []byte) error { _, err := ParseProxySpec(b); return err }, specCases},
		{"poolspec.v1.json", PoolSpecSchema, loadPoolSchema, reflect.TypeFor[PoolSpec](),
			func(b []byte) error { _, err := ParsePoolSpec(b); return err }, poolCases},
	}
}

func TestSchemasDeclareThemselves(t *testing.T) {
	for _, d := range schemaDocs() {
		t.Run(d.file, func(t *testing.T) {
			s := d.load(t)
			if s["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
				t.Errorf("$schema = %v, want draft 2020-12", s["$schema"])
			}
			id, _ := s["$id"].(string)
			if u, err := url.Parse(id); err != nil || !u.IsAbs() || !strings.HasSuffix(id, "/"+d.file) {
				t.Errorf("$id = %q, want an absolute URL ending in /%s", id, d.file)
			}
			b := d.get()
			b[0] = 'x'
			if d.get()[0] != '{' {
				t.Error("the schema getter hands out the embedded bytes themselves")
			}
		})
	}
}

// TestPoolTemplateIsProxySpec keeps the template on ProxySpec's own schema, so the two never
// drift: the "$ref" must be proxyspec.v1.json's "$id".
func TestPoolTemplateIsProxySpec(t *testing.T) {
	proxy, pool := loadSchema(t), loadPoolSchema(t)
	tmpl := pool["properties"].(map[string]any)["template"].(map[string]any)
	if tmpl["$ref"] != proxy["$id"] {
		t.Errorf("template $ref = %v, want proxyspec.v1.json's $id %v", tmpl["$ref"], proxy["$id"])
	}
}

func TestSchemaExamplesParse(t *testing.T) {
	for _, d := range schemaDocs() {
		s := d.load(t)
		examples, _ := s["examples"].([]any)
		if len(examples) == 0 {
			t.Errorf("%s has no examples", d.file)
		}
		for i, ex := range examples {
			doc, _ := json.Marshal(ex)
			if err := d.parse(doc); err != nil {
				t.Errorf("%s example %d: %v", d.file, i, err)
			}
			if !schemaAccepts(t, s, doc) {
				t.Errorf("%s example %d: the schema rejects it", d.file, i)
			}
		}
	}
}

// TestSchemaMatchesGoTypes fails on a field that the Go types and the schema do not both
// have, with the same JSON type, and on an object that lets unknown fields through.
func TestSchemaMatchesGoTypes(t *testing.T) {
	for _, d := range schemaDocs() {
		t.Run(d.file, func(t *testing.T) {
			want := map[string]string{}
			goFields(d.goType, "", want)
			s := d.load(t)
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
		})
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
		if reflect.PointerTo(ft).Implements(reflect.TypeFor[json.Unmarshaler]()) {
			// Its own JSON (autoscale.spares: "auto" or an integer): the schema says it
			// with anyOf, and neither side has one type.
			out[path] = ""
			continue
		}
		switch ft.Kind() {
		case reflect.Struct:
			out[path] = "object"
			goFields(ft, path+".", out)
		case reflect.Map:
			out[path] = "object"
			out[path+".*"] = jsonTypeOf(ft.Elem().Kind())
		case reflect.Slice:
			out[path] = "array"
			if et := ft.Elem(); et.Kind() == reflect.Struct {
				goFields(et, path+"[].", out)
			} else {
				out[path+"[]"] = jsonTypeOf(et.Kind())
			}
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
	case reflect.Bool:
		return "boolean"
	case reflect.Float64:
		return "number"
	}
	return "unsupported Go kind " + k.String()
}

func schemaFields(t *testing.T, node map[string]any, prefix string, out map[string]string) {
	if ref, ok := node["$ref"].(string); ok {
		// The fields are the referenced schema's; properties beside the "$ref" only narrow
		// them, so each must name one of them.
		target, ok := schemaByID.Load(ref)
		if !ok {
			t.Fatalf("%q: $ref %q is not a schema of this package", strings.TrimSuffix(prefix, "."), ref)
		}
		schemaFields(t, target.(map[string]any), prefix, out)
		props, _ := node["properties"].(map[string]any)
		for _, path := range mentionedFields(map[string]any{"properties": props}, prefix) {
			if _, ok := out[path]; !ok {
				t.Errorf("%s: narrowed beside the $ref, but not a field of %s", path, ref)
			}
		}
		return
	}
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
		if items, ok := sub["items"].(map[string]any); ok {
			if _, isObj := items["properties"]; isObj {
				schemaFields(t, items, prefix+name+"[].", out)
			} else {
				out[prefix+name+"[]"], _ = items["type"].(string)
			}
		}
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

// TestSchemaAgreesWithParser holds each schema and its parser to the same verdict on every
// table case the schema can judge.
func TestSchemaAgreesWithParser(t *testing.T) {
	for _, d := range schemaDocs() {
		t.Run(d.file, func(t *testing.T) {
			s := d.load(t)
			judged := 0
			for _, tc := range d.cases {
				if tc.schemaGap || !json.Valid([]byte(tc.doc)) {
					continue
				}
				judged++
				if got, want := schemaAccepts(t, s, []byte(tc.doc)), tc.fields == nil; got != want {
					t.Errorf("%s: schema accepts=%v, the parser accepts=%v", tc.name, got, want)
				}
			}
			if judged < len(d.cases)/2 {
				t.Errorf("only %d of %d cases judged", judged, len(d.cases))
			}
		})
	}
}
