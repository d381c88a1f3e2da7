package testcert_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"github.com/egressd/egressd/internal/testcert"
)

// The certificate verifies against the CA for every name and usage the tests dial with.
func TestWrite(t *testing.T) {
	f, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	for _, tc := range []struct {
		name  string
		usage x509.ExtKeyUsage
	}{
		{"127.0.0.1", x509.ExtKeyUsageServerAuth},
		{"localhost", x509.ExtKeyUsageServerAuth},
		{"127.0.0.1", x509.ExtKeyUsageClientAuth},
	} {
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: tc.name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
			t.Errorf("%s, usage %v: %v", tc.name, tc.usage, err)
		}
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots}); err == nil {
		t.Error("the certificate verifies for example.com")
	}
}
