package gcp

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	compute "cloud.google.com/go/compute/apiv1"
	"google.golang.org/api/option"
)

// clients are the SDK clients built from one credential. They are rebuilt when the
// credential's bytes change, and the old ones closed once no call uses them.
type clients struct {
	key   [sha256.Size]byte // of the credential JSON; zero for the metadata server
	inst  *compute.InstancesClient
	zops  *compute.ZoneOperationsClient
	fw    *compute.FirewallsClient
	users int  // calls in flight
	stale bool // replaced: close when users reaches 0
}

func (c *clients) close() {
	c.inst.Close()
	c.zops.Close()
	c.fw.Close()
}

// clientPool hands out clients for the credential as it is now: the file (or the ADC file)
// is read on every call, so a rotated key is used from the next call on, without a restart;
// reading a small file is cheap next to an API call, and an unchanged credential keeps its
// clients and their cached access token.
type clientPool struct {
	cfg  settings
	mu   sync.Mutex
	cur  *clients
	done bool
}

// credentialTypes are the JSON credential types accepted (the SDK wants the type named, so
// that a file of an unexpected kind is refused rather than trusted).
var credentialTypes = map[string]option.CredentialsType{
	"service_account":                  option.ServiceAccount,
	"authorized_user":                  option.AuthorizedUser,
	"external_account":                 option.ExternalAccount,
	"impersonated_service_account":     option.ImpersonatedServiceAccount,
	"external_account_authorized_user": "external_account_authorized_user",
}

// adcFile is where Application Default Credentials are read from, "" for the metadata server
// (https://cloud.google.com/docs/authentication/application-default-credentials).
func adcFile() string {
	if f := os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"); f != "" {
		return f
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	f := filepath.Join(home, ".config", "gcloud", "application_default_credentials.json")
	if _, err := os.Stat(f); err != nil {
		return ""
	}
	return f
}

// credential reads the credential JSON of this call; nil for the metadata server. Errors
// name the file, never its content.
func (cp *clientPool) credential() ([]byte, string, error) {
	file, key := cp.cfg.CredentialsFile, "credentialsFile"
	if file == "" {
		file, key = adcFile(), "application default credentials"
		if file == "" {
			return nil, "", nil // the metadata server: the SDK finds it
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s %s: %w", errNoCredentials, key, file, errors.Unwrap(err))
	}
	return b, key + " " + file, nil
}

// credentialOptions checks a credential JSON (only when it changed: parsing a key is not
// free) and returns the options that use it.
func credentialOptions(b []byte, where string) ([]option.ClientOption, error) {
	var head struct {
		Type       string `json:"type"`
		PrivateKey string `json:"private_key"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: %s is not JSON", errBadCredentials, where)
	}
	t, ok := credentialTypes[head.Type]
	if !ok {
		return nil, fmt.Errorf("%w: %s: credential type %q is not one of service_account, authorized_user, external_account, impersonated_service_account, external_account_authorized_user", errBadCredentials, where, head.Type)
	}
	if head.Type == "service_account" && !parsesAsKey(head.PrivateKey) {
		// The SDK would say so only when it signs, as a transport error.
		return nil, fmt.Errorf("%w: %s: private_key is not a PEM private key", errBadCredentials, where)
	}
	return []option.ClientOption{option.WithAuthCredentialsJSON(t, b)}, nil
}

// parsesAsKey reports whether s is a PEM PKCS #8 or PKCS #1 private key.
func parsesAsKey(s string) bool {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return false
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		return true
	}
	_, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	return err == nil
}

// get returns clients for the credential as it is now, and a release to call when the call
// is done.
func (cp *clientPool) get(ctx context.Context) (*clients, func(), error) {
	raw, where, err := cp.credential()
	if err != nil {
		return nil, nil, err
	}
	var key [sha256.Size]byte
	if raw != nil {
		key = sha256.Sum256(raw)
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.done {
		return nil, nil, errors.New("provider closed")
	}
	if cp.cur == nil || cp.cur.key != key {
		var credOpts []option.ClientOption
		if raw != nil {
			if credOpts, err = credentialOptions(raw, where); err != nil {
				return nil, nil, err
			}
		}
		c, err := cp.build(ctx, key, credOpts)
		if err != nil {
			return nil, nil, err
		}
		if old := cp.cur; old != nil {
			old.stale = true
			if old.users == 0 {
				old.close()
			}
		}
		cp.cur = c
	}
	c := cp.cur
	c.users++
	return c, func() { cp.release(c) }, nil
}

func (cp *clientPool) release(c *clients) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	c.users--
	if c.stale && c.users == 0 {
		c.close()
	}
}

// build makes the clients. The SDK's own logger is a discarding one: at debug level
// (GOOGLE_SDK_GO_LOGGING_LEVEL) it would log request bodies, which hold user-data.
func (cp *clientPool) build(ctx context.Context, key [sha256.Size]byte, credOpts []option.ClientOption) (*clients, error) {
	opts := append([]option.ClientOption{option.WithLogger(slog.New(slog.DiscardHandler))}, credOpts...)
	if cp.cfg.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(cp.cfg.Endpoint))
	}
	c := &clients{key: key}
	var err error
	// The REST clients do no I/O here; ctx only bounds credential detection.
	if c.inst, err = compute.NewInstancesRESTClient(ctx, opts...); err != nil {
		return nil, credentialsError(err)
	}
	if c.zops, err = compute.NewZoneOperationsRESTClient(ctx, opts...); err != nil {
		c.inst.Close()
		return nil, credentialsError(err)
	}
	if c.fw, err = compute.NewFirewallsRESTClient(ctx, opts...); err != nil {
		c.inst.Close()
		c.zops.Close()
		return nil, credentialsError(err)
	}
	return c, nil
}

// credentialsError classifies a client that cannot be built: its credential is unusable.
// The SDK's message names what is wrong (a key that does not parse), never the key.
func credentialsError(err error) error {
	return fmt.Errorf("%w: %w", errBadCredentials, err)
}

// close closes the current clients; later calls fail.
func (cp *clientPool) close() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.done = true
	if cp.cur != nil {
		cp.cur.stale = true
		if cp.cur.users == 0 {
			cp.cur.close()
		}
		cp.cur = nil
	}
}
