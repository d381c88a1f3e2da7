package pvetest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

const maxForm = 1 << 20

// form reads a call's parameters as pve-http-server does: the query string merged with an
// application/x-www-form-urlencoded or application/json body. JSON numbers and booleans
// become their PVE string forms ("1"/"0" for booleans).
func form(r *http.Request) (map[string]string, *apiError) {
	out := map[string]string{}
	for k, v := range r.URL.Query() {
		out[k] = v[len(v)-1]
	}
	if r.Body == nil || r.Method == http.MethodGet || r.Method == http.MethodDelete {
		return out, nil
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	body, err := io.ReadAll(io.LimitReader(r.Body, maxForm+1))
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "unable to read request body: %v", err)
	}
	if len(body) > maxForm {
		return nil, errorf(http.StatusRequestEntityTooLarge, "request too large")
	}
	switch {
	case len(body) == 0:
	case ct == "application/json":
		var doc map[string]any
		if err := json.Unmarshal(body, &doc); err != nil {
			return nil, errorf(http.StatusBadRequest, "unable to parse JSON body: %v", err)
		}
		for k, v := range doc {
			switch v := v.(type) {
			case string:
				out[k] = v
			case float64:
				out[k] = strconv.FormatFloat(v, 'f', -1, 64)
			case bool:
				out[k] = map[bool]string{true: "1", false: "0"}[v]
			case nil:
			default:
				return nil, param(k, "type check ('string') failed")
			}
		}
	default: // PVE reads any other body as form-encoded
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "unable to parse form body: %v", err)
		}
		for k, v := range vals {
			out[k] = v[len(v)-1]
		}
	}
	return out, nil
}

// schema checks params against the names an endpoint takes: unknown names, missing
// required ones (PVE's own texts for both).
func schema(params map[string]string, required []string, optional ...string) *apiError {
	errs := map[string]string{}
	for k := range params {
		if !slices.Contains(required, k) && !slices.Contains(optional, k) && !dynamicKey(k, optional) {
			errs[k] = "property is not defined in schema and the schema does not allow additional properties"
		}
	}
	for _, k := range required {
		if _, ok := params[k]; !ok {
			errs[k] = "property is missing and it is not optional"
		}
	}
	if len(errs) > 0 {
		return paramError(errs)
	}
	return nil
}

// dynamicKey matches numbered keys against a "netN"-style optional entry: optional "net#"
// admits net0…net31 and so on.
func dynamicKey(k string, optional []string) bool {
	for _, o := range optional {
		prefix, ok := strings.CutSuffix(o, "#")
		if !ok {
			continue
		}
		n, found := strings.CutPrefix(k, prefix)
		if !found || n == "" || (len(n) > 1 && n[0] == '0') {
			continue
		}
		if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < 32 {
			return true
		}
	}
	return false
}

// intParam parses an integer parameter within [lo, hi] (PVE's texts).
func intParam(params map[string]string, field string, lo, hi int64) (int64, *apiError) {
	v, err := strconv.ParseInt(params[field], 10, 64)
	switch {
	case err != nil:
		return 0, param(field, fmt.Sprintf("type check ('integer') failed - got '%s'", params[field]))
	case v < lo:
		return 0, param(field, fmt.Sprintf("value must have a minimum value of %d", lo))
	case v > hi:
		return 0, param(field, fmt.Sprintf("value must have a maximum value of %d", hi))
	}
	return v, nil
}

// boolParam parses a PVE boolean (1/0, yes/no, on/off, true/false); absent is def.
func boolParam(params map[string]string, field string, def bool) (bool, *apiError) {
	v, ok := params[field]
	if !ok {
		return def, nil
	}
	switch strings.ToLower(v) {
	case "1", "yes", "on", "true":
		return true, nil
	case "0", "no", "off", "false":
		return false, nil
	}
	return false, param(field, fmt.Sprintf("type check ('boolean') failed - got '%s'", v))
}

// vmidParam is the {vmid} path value, a pve-vmid.
func vmidParam(r *http.Request, field string) (int, *apiError) {
	v, e := intParam(map[string]string{field: r.PathValue(field)}, field, 100, 999999999)
	return int(v), e
}
