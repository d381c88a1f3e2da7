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

func FuzzParsePoolSpec(f *testing.F) {
	for _, tc := range poolCases {
		f.Add([]byte(tc.doc))
	}
	schema := loadPoolSchema(f)
	for _, ex := range schema["examples"].([]any) {
		doc, _ := json.Marshal(ex)
		f.Add(doc)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParsePoolSpec(data)
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
		// The parser is the stricter of the two: what it takes, the schema takes.
		if !schemaAccepts(t, schema, data) {
			t.Fatalf("ParsePoolSpec accepts what poolspec.v1.json rejects: %q", data)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParsePoolSpec(out)
		if err != nil {
			t.Fatalf("re-marshalled spec %s does not parse: %v", out, err)
		}
		if !reflect.DeepEqual(s, again) {
			t.Fatalf("round trip changed the spec:\n%+v\n%+v\nvia %s", s, again, out)
		}
		// Members are written from the template: it must be a proxy spec on its own.
		tmpl, err := json.Marshal(s.Template)
		if err != nil {
			t.Fatal(err)
		}
		if member, err := ParseProxySpec(tmpl); err != nil || !reflect.DeepEqual(member, s.Template) {
			t.Fatalf("template %s is not the same proxy spec on its own: %+v, %v", tmpl, member, err)
		}
		// Exactly one of replicas and autoscale; the cap holds the most either may ask for.
		if (s.Replicas == nil) == (s.Autoscale == nil) {
			t.Fatalf("replicas %v and autoscale %+v: want exactly one", s.Replicas, s.Autoscale)
		}
		most := 0
		if s.Replicas != nil {
			most = *s.Replicas
		} else {
			most = *s.Autoscale.Max
			if a := s.Autoscale; *a.Min > most || a.TargetUtilization <= 0 || a.TargetUtilization > 1 || a.ScaleDownStep < 1 {
				t.Fatalf("autoscale %+v passed validation", *a)
			}
		}
		if n := s.MaxMembers(); n < most || n > 2*MaxReplicas {
			t.Fatalf("MaxMembers = %d with %d members at most", n, most)
		}
	})
}
