//go:build tools

// Package tools pins the etcd main package so `go mod tidy` keeps its requirements.
package tools

import _ "go.etcd.io/etcd/server/v3"
