package schemas

import (
	"bytes"
	_ "embed"
)

//go:embed proxyspec.v1.json
var proxySpecSchema []byte

// ProxySpecSchema returns the JSON Schema (draft 2020-12) of ProxySpec v1, for editors and
// for tools that check a spec before it is written to the proxies bucket. The result is a
// copy: callers may keep or change it.
func ProxySpecSchema() []byte { return bytes.Clone(proxySpecSchema) }
