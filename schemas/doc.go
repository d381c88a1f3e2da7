// Package schemas holds the user-facing documents of egressd: the ProxySpec users write to the
// proxies bucket and the PoolSpec they write to the pools bucket, each as an embedded JSON
// Schema for other tools and as Go types with a strict decoder whose errors name the offending
// field.
//
// This package imports only the standard library.
package schemas
