// Package testcert writes a throwaway CA and a certificate it signs, for tests that run
// nats-server with the deployed TLS config on loopback (deploy/ and the cluster tests of
// cmd/egressd).
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files Write made.
type Files struct {
	Cert, Key, CA string
}

// Write writes ca.pem, server.pem and server-key.pem into dir: a CA valid for a day and a
// certificate for 127.0.0.1 and localhost signed by it, with both the serverAuth and
// clientAuth usages, so one certificate serves a server's clients and its mutually
// authenticated routes.
func Write(dir string) (Files, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egressd test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Files{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem"), CA: filepath.Join(dir, "ca.pem")}
	for _, w := range []struct {
		path, typ string
		der       []byte
	}{{f.Cert, "CERTIFICATE", der}, {f.Key, "EC PRIVATE KEY", keyDER}, {f.CA, "CERTIFICATE", caDER}} {
		if err := os.WriteFile(w.path, pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der}), 0o600); err != nil {
			return Files{}, fmt.Errorf("write %s: %w", w.path, err)
		}
	}
	return f, nil
}
