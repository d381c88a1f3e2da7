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

//go:embed poolspec.v1.json
var poolSpecSchema []byte

// PoolSpecSchema returns the JSON Schema (draft 2020-12) of PoolSpec v1, the value of a key in
// the pools bucket. Its template refers to ProxySpecSchema's by that schema's "$id", so a tool
// checking a pool spec needs both. The result is a copy: callers may keep or change it.
func PoolSpecSchema() []byte { return bytes.Clone(poolSpecSchema) }
