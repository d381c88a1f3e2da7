package pvetest

import (
	"crypto/tls"
	"testing"

	"go.uber.org/goleak"
)

// Every task, boot and forward proxy must be gone after Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func tlsConfig(s *Server) *tls.Config { return &tls.Config{RootCAs: s.CertPool()} }
