package libvirt

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Dial stages, in order. A dial error names the stage it failed in, which is what Check's
// reasons are made of.
const (
	stageCredentials = "credentials" // reading sshKeyFile and knownHostsFile
	stageTCP         = "tcp"         // connecting to the host's address
	stageSSH         = "ssh"         // handshake, host key, authentication
	stageSocket      = "socket"      // the forwarded libvirt socket and libvirt's own handshake
)

// dialError is a failed dial, tagged with its stage.
type dialError struct {
	Stage string
	Host  string
	Err   error
}

func (e *dialError) Error() string {
	return fmt.Sprintf("connecting to host %s failed at the %s stage: %v", e.Host, e.Stage, e.Err)
}

func (e *dialError) Unwrap() error { return e.Err }

// credentials are read from disk on every dial, so rotating a key or pinning a new host key
// takes effect at the next connection, without a restart.
type credentials struct {
	signer  ssh.Signer
	hostKey ssh.HostKeyCallback // nil with insecureIgnoreHostKey
}

func (p *Provider) loadCredentials() (credentials, error) {
	var c credentials
	pem, err := os.ReadFile(p.cfg.SSHKeyFile)
	if err != nil {
		return c, fmt.Errorf("%w: sshKeyFile: %w", errCredentials, err)
	}
	c.signer, err = ssh.ParsePrivateKey(pem)
	if err != nil {
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			return c, fmt.Errorf("%w: sshKeyFile %s is protected by a passphrase, which egressd cannot type", errBadCredentials, p.cfg.SSHKeyFile)
		}
		// The parser's message never quotes the key.
		return c, fmt.Errorf("%w: sshKeyFile %s: %v", errBadCredentials, p.cfg.SSHKeyFile, err)
	}
	if p.cfg.InsecureIgnoreHostKey {
		return c, nil
	}
	c.hostKey, err = knownhosts.New(p.cfg.KnownHostsFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return c, fmt.Errorf("%w: knownHostsFile: %w", errCredentials, err)
	case err != nil:
		var pe *os.PathError
		if errors.As(err, &pe) {
			return c, fmt.Errorf("%w: knownHostsFile: %w", errCredentials, err)
		}
		return c, fmt.Errorf("%w: knownHostsFile: %v", errBadCredentials, err)
	}
	return c, nil
}

// dialSSH is the real dialFunc: TCP, SSH, a direct-streamlocal@openssh.com channel to the
// host's libvirt socket, and go-libvirt on top, all under one dial budget. The budget is
// enforced on the socket itself (a deadline, and a close when ctx ends), because neither the
// SSH handshake nor go-libvirt's connect takes a context.
func (p *Provider) dialSSH(ctx context.Context, h HostConfig, dedicated bool) (conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.dial)
	defer cancel()
	fail := func(stage string, err error) (conn, error) {
		p.log.Debug("libvirt host connect failed", "host", h.Name, "stage", stage, "err", err)
		return nil, &dialError{Stage: stage, Host: h.Name, Err: err}
	}
	creds, err := p.loadCredentials()
	if err != nil {
		return fail(stageCredentials, err)
	}
	var d net.Dialer
	tcp, err := d.DialContext(ctx, "tcp", h.Address)
	if err != nil {
		return fail(stageTCP, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		tcp.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { tcp.Close() })
	l, stage, err := p.handshake(tcp, h, creds, dedicated)
	if !stop() {
		// ctx ended during the handshake and closed the socket under it.
		if err == nil {
			l.kill("dial cancelled")
			stage = stageSocket
		}
		err = errors.Join(ctx.Err(), err)
	}
	if err != nil {
		tcp.Close()
		return fail(stage, err)
	}
	tcp.SetDeadline(time.Time{})
	l.watch(p.cfg.keepalive)
	p.log.Debug("libvirt host connected", "host", h.Name, "dedicated", dedicated)
	return newRPCConn(l, p), nil
}

func (p *Provider) handshake(tcp net.Conn, h HostConfig, creds credentials, dedicated bool) (*link, string, error) {
	hostKey := ssh.InsecureIgnoreHostKey()
	var algorithms []string
	if creds.hostKey != nil {
		hostKey = explainHostKey(creds.hostKey)
		algorithms = knownAlgorithms(creds.hostKey, h.Address, tcp.RemoteAddr())
	}
	cfg := &ssh.ClientConfig{
		User:              h.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(creds.signer)},
		HostKeyCallback:   hostKey,
		HostKeyAlgorithms: algorithms,
	}
	sc, chans, reqs, err := ssh.NewClientConn(tcp, h.Address, cfg)
	if err != nil {
		// x/crypto/ssh has no typed error for a refused key; this is its fixed message.
		if strings.Contains(err.Error(), "unable to authenticate") {
			err = fmt.Errorf("%w: user %s on %s: %w", errAuthRefused, h.User, h.Address, err)
		}
		return nil, stageSSH, err
	}
	client := ssh.NewClient(sc, chans, reqs)
	lv := golibvirt.NewWithDialer(streamDialer{client: client, socket: h.Socket})
	l := &link{host: h.Name, tcp: tcp, client: client, lv: lv, dedicated: dedicated, dead: make(chan struct{}), log: p.log}
	if err := lv.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		l.kill("libvirt connect failed")
		return nil, stageSocket, err
	}
	return l, "", nil
}

// streamDialer is go-libvirt's way to the socket: each Dial opens a direct-streamlocal
// channel on the SSH connection to the host's unix socket.
type streamDialer struct {
	client *ssh.Client
	socket string
}

func (d streamDialer) Dial() (net.Conn, error) { return d.client.Dial("unix", d.socket) }

// explainHostKey turns knownhosts' verdicts into messages an operator can act on.
func explainHostKey(cb ssh.HostKeyCallback) ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(hostname, remote, key)
		var (
			ke *knownhosts.KeyError
			re *knownhosts.RevokedError
		)
		switch {
		case err == nil:
			return nil
		case errors.As(err, &re):
			return fmt.Errorf("%w: the %s key of %s is marked @revoked in knownHostsFile", errHostKey, key.Type(), hostname)
		case errors.As(err, &ke) && len(ke.Want) == 0:
			return fmt.Errorf("%w: %s is not in knownHostsFile (pin its %s key for exactly this address, e.g. with ssh-keyscan)", errHostKey, hostname, key.Type())
		case errors.As(err, &ke):
			return fmt.Errorf("%w: the %s key %s offered by %s does not match knownHostsFile: the host key changed, or something is in the middle", errHostKey, key.Type(), ssh.FingerprintSHA256(key), hostname)
		}
		return fmt.Errorf("%w: %w", errHostKey, err)
	}
}

// probeKey is a key no host has; asking knownhosts about it lists the keys pinned for a host.
var probeKey, _ = ssh.NewPublicKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public())

// knownAlgorithms returns the host key algorithms pinned for address, so that the handshake
// asks for a key knownHostsFile can vouch for: a host offering ed25519 first would otherwise
// read as "changed" against an RSA-only pin. Nil when nothing is pinned (the handshake then
// fails with "not in knownHostsFile").
func knownAlgorithms(cb ssh.HostKeyCallback, address string, remote net.Addr) []string {
	var ke *knownhosts.KeyError
	if err := cb(address, remote, probeKey); !errors.As(err, &ke) {
		return nil
	}
	var algos []string
	for _, k := range ke.Want {
		switch t := k.Key.Type(); t {
		case ssh.KeyAlgoRSA:
			// The key type ssh-rsa is signed with SHA-2 by any sshd of the last decade.
			algos = append(algos, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256)
		default:
			algos = append(algos, t)
		}
	}
	return algos
}
