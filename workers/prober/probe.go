package prober

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/egressd/egressd/schemas"
)

// maxBody bounds what a probe reads of the check URL's answer: an echo reply is a few hundred
// bytes, and a larger page is read only that far (it is then simply not an echo).
const maxBody = 64 << 10

// userAgent names the prober to the check target.
const userAgent = "egressd-prober/1"

// result is what one probe found. err is nil on success; it never holds a credential.
type result struct {
	err      error
	latency  time.Duration // the whole probe: dial, CONNECT, TLS, request, body
	egressIP string        // set when the answer was an echo reply
	leaked   []string
	echo     bool
}

// probe opens a CONNECT tunnel through the proxy at proxyAddr to target's host and fetches
// target through it, as a crawler would fetch an https page, within ctx's deadline.
func (p *Prober) probe(ctx context.Context, proxyAddr string, target *url.URL, auth *schemas.Auth) result {
	start := time.Now()
	res := p.fetch(ctx, proxyAddr, target, auth)
	res.latency = time.Since(start)
	return res
}

func (p *Prober) fetch(ctx context.Context, proxyAddr string, target *url.URL, auth *schemas.Auth) result {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", proxyAddr)
	if err != nil {
		return result{err: fmt.Errorf("dial proxy: %w", err)}
	}
	defer conn.Close()
	// Every read and write below stops at the probe's deadline, or at once when ctx ends.
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	authority := hostPort(target)
	br := bufio.NewReader(conn)
	if err := writeConnect(conn, authority, auth); err != nil {
		return result{err: fmt.Errorf("send CONNECT: %w", err)}
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return result{err: fmt.Errorf("read CONNECT answer: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		// The proxy's reason phrase and body are not quoted: they are the proxy's words, and
		// a misbehaving proxy could echo the credential back in them.
		return result{err: fmt.Errorf("proxy refused CONNECT to %s: %d %s", authority, resp.StatusCode, http.StatusText(resp.StatusCode))}
	}

	var tunnel net.Conn = &bufferedConn{Conn: conn, r: br}
	if target.Scheme == "https" {
		tc := tls.Client(tunnel, &tls.Config{
			ServerName:         target.Hostname(),
			InsecureSkipVerify: p.cfg.InsecureSkipVerify,
			NextProtos:         []string{"http/1.1"},
		})
		if err := tc.HandshakeContext(ctx); err != nil {
			return result{err: fmt.Errorf("TLS with %s through the proxy: %w", authority, err)}
		}
		tunnel = tc
	}

	req := &http.Request{Method: http.MethodGet, URL: target, Host: target.Host, Header: http.Header{}, Close: true}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "application/json, */*;q=0.5")
	if u := target.User; u != nil {
		pw, _ := u.Password()
		req.SetBasicAuth(u.Username(), pw)
	}
	if err := req.Write(tunnel); err != nil {
		return result{err: fmt.Errorf("send GET through the tunnel: %w", err)}
	}
	resp, err = http.ReadResponse(bufio.NewReader(tunnel), req)
	if err != nil {
		return result{err: fmt.Errorf("read answer of the check URL: %w", err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return result{err: fmt.Errorf("read body of the check URL: %w", err)}
	}
	if resp.StatusCode/100 != 2 {
		return result{err: fmt.Errorf("check URL answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))}
	}
	res := result{}
	if echo, ok := decodeEcho(resp.Header.Get("Content-Type"), body); ok {
		res.echo, res.egressIP, res.leaked = true, echo.IP, echo.leaked()
	}
	return res
}

// writeConnect sends the CONNECT request, with the proxy credential when the spec has one.
func writeConnect(w io.Writer, authority string, auth *schemas.Auth) error {
	head := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\nUser-Agent: " + userAgent + "\r\n"
	if auth != nil {
		head += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(auth.Username+":"+auth.Password)) + "\r\n"
	}
	_, err := io.WriteString(w, head+"\r\n")
	return err
}

// hostPort is target's host with its port, the scheme's default when the URL has none.
func hostPort(target *url.URL) string {
	port := target.Port()
	if port == "" {
		port = "80"
		if target.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(target.Hostname(), port)
}

// bufferedConn reads through the reader that parsed the CONNECT answer, so that no byte the
// target sent right behind it is lost.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
