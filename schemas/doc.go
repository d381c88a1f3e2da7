// Package schemas holds the user-facing documents of egressd: the ProxySpec users write to the
// proxies bucket, as an embedded JSON Schema for other tools and as Go types with a strict
// decoder whose errors name the offending field.
//
// This package imports only the standard library.
package schemas
