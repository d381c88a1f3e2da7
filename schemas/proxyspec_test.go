package schemas

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseProxySpecDefaults(t *testing.T) {
	one := 1
	tests := []struct {
		name string
		doc  string
		want ProxySpec
	}{
		{
			name: "managed",
			doc:  `{"provider":"p"}`,
			want: ProxySpec{V: 1, Mode: ModeManaged, Provider: "p", Port: 3128, MaxLeases: &one,
				HealthCheck: HealthCheck{IntervalSeconds: 30, TimeoutSeconds: 5, FailureThreshold: 3, SuccessThreshold: 1, RequireAnonymity: AnonymityNone}},
		},
		{
			name: "external endpoint port is the spec port",
			doc:  `{"mode":"external","port":8080,"endpoint":{"host":"h"},"attributes":{}}`,
			want: ProxySpec{V: 1, Mode: ModeExternal, Port: 8080, Endpoint: &Endpoint{Host: "h", Port: 8080}, MaxLeases: &one,
				HealthCheck: HealthCheck{IntervalSeconds: 30, TimeoutSeconds: 5, FailureThreshold: 3, SuccessThreshold: 1, RequireAnonymity: AnonymityNone}},
		},
		{
			name: "external endpoint port defaults to 3128",
			doc:  `{"mode":"external","endpoint":{"host":"h"}}`,
			want: ProxySpec{V: 1, Mode: ModeExternal, Port: 3128, Endpoint: &Endpoint{Host: "h", Port: 3128}, MaxLeases: &one,
				HealthCheck: HealthCheck{IntervalSeconds: 30, TimeoutSeconds: 5, FailureThreshold: 3, SuccessThreshold: 1, RequireAnonymity: AnonymityNone}},
		},
		{
			name: "timeout never defaults above the interval",
			doc:  `{"provider":"p","healthCheck":{"intervalSeconds":2}}`,
			want: ProxySpec{V: 1, Mode: ModeManaged, Provider: "p", Port: 3128, MaxLeases: &one,
				HealthCheck: HealthCheck{IntervalSeconds: 2, TimeoutSeconds: 2, FailureThreshold: 3, SuccessThreshold: 1, RequireAnonymity: AnonymityNone}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProxySpec([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}

	t.Run("explicit zero maxLeases is kept", func(t *testing.T) {
		got, err := ParseProxySpec([]byte(`{"provider":"p","maxLeases":0}`))
		if err != nil || got.MaxLeases == nil || *got.MaxLeases != 0 {
			t.Fatalf("got %v, %v; want maxLeases 0", got.MaxLeases, err)
		}
	})
}

func TestParseProxySpecCases(t *testing.T) {
	for _, tc := range specCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProxySpec([]byte(tc.doc))
			if got := errorFields(t, err); !slices.Equal(got, tc.fields) {
				t.Errorf("fields named: %q, want %q; error: %v", got, tc.fields, err)
			}
		})
	}
}

// errorFields returns the Field of every error joined in err, failing the test if any of them
// is not a *FieldError.
func errorFields(t testing.TB, err error) []string {
	t.Helper()
	var fields []string
	for _, e := range leafErrors(err) {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%T %q is not a *FieldError", e, e)
		}
		if !strings.HasPrefix(e.Error(), fe.Field+": ") {
			t.Errorf("%q does not start with its field %q", e, fe.Field)
		}
		fields = append(fields, fe.Field)
	}
	return fields
}

func leafErrors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var leaves []error
		for _, e := range j.Unwrap() {
			leaves = append(leaves, leafErrors(e)...)
		}
		return leaves
	}
	return []error{err}
}

func TestWrongTypeInAttributesNamesAttributes(t *testing.T) {
	// encoding/json names the map ("attributes") or, with GOEXPERIMENT=jsonv2, the entry.
	_, err := ParseProxySpec([]byte(`{"provider":"p","attributes":{"a":1}}`))
	var fe *FieldError
	if !errors.As(err, &fe) || (fe.Field != "attributes" && fe.Field != "attributes.a") {
		t.Fatalf("got %v, want a FieldError for attributes", err)
	}
}

func TestErrorsNeverQuoteSecrets(t *testing.T) {
	const pw, ud = "PW-SENTINEL-7f3a", "UD-SENTINEL-9b2c"
	docs := []string{
		`{"provider":"P","auth":{"username":"u","password":"` + pw + `"},"cloudInit":"` + ud + `"}`,
		`{"provider":"p","auth":{"username":"u:x","password":"` + pw + `","x":1}}`,
		`{"provider":"p","auth":{"username":"u","password":"` + pw + `","password":"` + pw + `"}}`,
		`{"provider":"p","auth":{"username":"u","password":` + strings.TrimPrefix(pw, "PW-SENTINEL-") + `}}`,
		`{"provider":"p","auth":{"username":"u","password":987654321987}}`,
		`{"provider":"p","auth":{"username":"u","password":"` + pw + `\x"}}`,
		`{"provider":"p","auth":{"username":"u","password":"` + pw,
		`{"provider":"p","auth":{"username":"u","password":"` + pw + `"}} trailing`,
		`{"provider":"p","cloudInit":"` + ud + `","cloudInitRef":"x"}`,
		`{"provider":"p","cloudInitRef":"#cloud-config\n` + ud + `"}`,
		`{"provider":"p","cloudInit":["` + ud + `"]}`,
		`{"provider":"p","cloudInit":"` + ud + `","healthCheck":{"bogus":1}}`,
		`{"mode":"external","endpoint":{"host":"crawler:` + pw + `@10.0.0.5"},"cloudInit":"` + ud + `"}`,
		`{"v":2,"auth":{"username":"u","password":"` + pw + `"}}`,
	}
	for _, doc := range docs {
		_, err := ParseProxySpec([]byte(doc))
		if err == nil {
			t.Errorf("%s: parsed, want an error", doc)
			continue
		}
		for _, secret := range []string{pw, ud, "987654321987", "7f3a"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q quotes %q", err, secret)
			}
		}
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"", false},
		{"a", true},
		{"A", false},
		{"-a", false},
		{"a-", false},
		{"0", true},
		{"crawl-1", true},
		{"a--b", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"a_b", false},
		{"a.b", false},
		{"a b", false},
		{"é", false},
	}
	for _, tc := range tests {
		if err := ValidName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
