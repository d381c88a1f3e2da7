package gcptest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// ProxyMetadataKey is the metadata item the gcp provider delivers the proxy's port and
// credential in (gcp.MetadataProxy; the same document as the libvirt provider's egressd.json).
const ProxyMetadataKey = "egressd-proxy"

// ProxyServeFunc serves egressd's forward proxy on ln until ctx is done, checking basic auth
// against authFile when it is not "" (forwardproxy.Serve with Config.AuthFile).
type ProxyServeFunc func(ctx context.Context, ln net.Listener, authFile string) error

// EgressdImage is the boot of an image built as the gcp guide describes: it reads the
// egressd-proxy metadata item, writes its auth line (if any) to a file of its own under dir,
// and runs the forward proxy on the port the item names. A missing or unreadable item is a
// VM whose proxy does not start.
func EgressdImage(dir string, serve ProxyServeFunc) BootFunc {
	return func(vm VM) (int, ServeFunc, error) {
		raw, ok := vm.Metadata[ProxyMetadataKey]
		if !ok {
			return 0, nil, errors.New("no " + ProxyMetadataKey + " metadata item")
		}
		var doc struct {
			V    int    `json:"v"`
			Port int    `json:"port"`
			Auth string `json:"auth"`
		}
		if err := json.Unmarshal([]byte(raw), &doc); err != nil || doc.V != 1 {
			return 0, nil, fmt.Errorf("%s: unreadable (version %d): %v", ProxyMetadataKey, doc.V, err)
		}
		authFile := ""
		if doc.Auth != "" {
			authFile = filepath.Join(dir, vm.Zone+"-"+vm.Name+".auth")
			if err := os.WriteFile(authFile, []byte(doc.Auth+"\n"), 0o600); err != nil {
				return 0, nil, err
			}
		}
		return doc.Port, func(ctx context.Context, ln net.Listener) error { return serve(ctx, ln, authFile) }, nil
	}
}

// ServiceAccount is a service-account key file for a simulator: a fresh RSA key, keyID as
// its private_key_id, and token_uri at srv's token endpoint. Auth is what srv must accept
// (Options.Auth or SetAuth), issuing token.
func ServiceAccount(srvURL, project, keyID, token string) (file []byte, auth Auth, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, Auth{}, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, Auth{}, err
	}
	email := "egressd@" + project + ".iam.gserviceaccount.com"
	file, err = json.MarshalIndent(map[string]string{
		"type":           "service_account",
		"project_id":     project,
		"private_key_id": keyID,
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   email,
		"client_id":      "100000000000000000001",
		"token_uri":      srvURL + TokenPath,
	}, "", "  ")
	return file, Auth{Email: email, Key: &key.PublicKey, Token: token}, err
}
