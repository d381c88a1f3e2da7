package prober

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// maxBody bounds what a probe reads of the check URL's answer: an echo reply is a few hundred
// bytes, and a larger page is read only that far (it is then simply not an echo).
const maxBody = 64 << 10

// userAgent names the prober to the check target.
const userAgent = "egressd-prober/1"

// pathResult is what one path of a probe found. err is nil on success; it never holds a
// credential.
type pathResult struct {
	err       error
	echo      bool // the answer was an echo reply; the fields below come from it
	egressIP  string
	leaked    []string
	anonymity events.Anonymity
}

// result is what one probe found: the CONNECT path, whose outcome decides health (its err
// and latency), and the plain-HTTP path.
type result struct {
	pathResult
	latency time.Duration // the CONNECT path: dial, CONNECT, TLS, request, body
	forward *pathResult   // nil when the prober has no plain-HTTP echo endpoint to send it to
}

// Why a path gave no verdict when nothing failed.
const (
	// errNotEcho: the spec's check URL is another page, which says nothing of what a site sees.
	errNotEcho = "no verdict: the check URL's answer is not an echo reply"
	// errNoForward: the prober's default check URL is https, so there is no plain-HTTP echo
	// endpoint to forward to.
	errNoForward = "not checked: the prober has no plain-HTTP echo endpoint"
)

// paths is the record's account of each path.
func (r result) paths() []events.PathCheck {
	out := []events.PathCheck{r.pathResult.check(events.PathConnect)}
	if r.forward == nil {
		return append(out, events.PathCheck{Path: events.PathForward, Error: errNoForward})
	}
	return append(out, r.forward.check(events.PathForward))
}

func (r pathResult) check(path string) events.PathCheck {
	pc := events.PathCheck{Path: path}
	switch {
	case r.err != nil:
		pc.Error = r.err.Error()
	case !r.echo:
		pc.Error = errNotEcho
	default:
		pc.EgressIP, pc.Leaked, pc.Anonymity = r.egressIP, r.leaked, r.anonymity
	}
	return pc
}

// probe checks both paths a crawler's requests take through the proxy at proxyAddr, at the
// same time and within ctx's deadline: a CONNECT tunnel to target's host with target fetched
// through it, as a crawler fetches an https page, and, when forward is set, a plain-HTTP
// request for forward (the prober's echo endpoint) handed to the proxy to forward, as a
// crawler fetches an http page; only there can the proxy add headers.
func (p *Prober) probe(ctx context.Context, proxyAddr string, target, forward *url.URL, auth *schemas.Auth) result {
	var fwd chan pathResult
	if forward != nil {
		fwd = make(chan pathResult, 1)
		go func() { fwd <- p.forwardFetch(ctx, proxyAddr, forward, auth) }()
	}
	start := time.Now()
	res := result{pathResult: p.fetch(ctx, proxyAddr, target, auth)}
	res.latency = time.Since(start)
	if fwd != nil {
		f := <-fwd
		res.forward = &f
	}
	return res
}

// dialProxy connects to the proxy with every read and write bounded by ctx's deadline (or
// cut at once when ctx ends). client is the prober's address on the connection, as the proxy
// sees it unless a NAT sits between them: what a transparent proxy passes on.
func dialProxy(ctx context.Context, proxyAddr string) (conn net.Conn, client netip.Addr, done func(), err error) {
	var d net.Dialer
	conn, err = d.DialContext(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, netip.Addr{}, nil, fmt.Errorf("dial proxy: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	if ap, err := netip.ParseAddrPort(conn.LocalAddr().String()); err == nil {
		client = ap.Addr().Unmap()
	}
	return conn, client, func() { stop(); conn.Close() }, nil
}

func (p *Prober) fetch(ctx context.Context, proxyAddr string, target *url.URL, auth *schemas.Auth) pathResult {
	conn, client, done, err := dialProxy(ctx, proxyAddr)
	if err != nil {
		return pathResult{err: err}
	}
	defer done()

	authority := hostPort(target)
	br := bufio.NewReader(conn)
	if err := writeConnect(conn, authority, auth); err != nil {
		return pathResult{err: fmt.Errorf("send CONNECT: %w", err)}
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return pathResult{err: fmt.Errorf("read CONNECT answer: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		// The proxy's reason phrase and body are not quoted: they are the proxy's words, and
		// a misbehaving proxy could echo the credential back in them.
		return pathResult{err: fmt.Errorf("proxy refused CONNECT to %s: %d %s", authority, resp.StatusCode, http.StatusText(resp.StatusCode))}
	}

	var tunnel net.Conn = &bufferedConn{Conn: conn, r: br}
	if target.Scheme == "https" {
		tc := tls.Client(tunnel, &tls.Config{
			ServerName:         target.Hostname(),
			InsecureSkipVerify: p.cfg.InsecureSkipVerify,
			NextProtos:         []string{"http/1.1"},
		})
		if err := tc.HandshakeContext(ctx); err != nil {
			return pathResult{err: fmt.Errorf("TLS with %s through the proxy: %w", authority, err)}
		}
		tunnel = tc
	}

	req := checkRequest(target)
	if err := req.Write(tunnel); err != nil {
		return pathResult{err: fmt.Errorf("send GET through the tunnel: %w", err)}
	}
	resp, err = http.ReadResponse(bufio.NewReader(tunnel), req)
	if err != nil {
		return pathResult{err: fmt.Errorf("read answer of the check URL: %w", err)}
	}
	return readAnswer(resp, client, "check URL")
}

// forwardFetch sends target (an http URL) to the proxy in absolute form, with the proxy
// credential, for the proxy to forward.
func (p *Prober) forwardFetch(ctx context.Context, proxyAddr string, target *url.URL, auth *schemas.Auth) pathResult {
	conn, client, done, err := dialProxy(ctx, proxyAddr)
	if err != nil {
		return pathResult{err: err}
	}
	defer done()
	req := checkRequest(target)
	if auth != nil {
		req.Header.Set("Proxy-Authorization", basicAuth(auth))
	}
	if err := req.WriteProxy(conn); err != nil {
		return pathResult{err: fmt.Errorf("send the plain-HTTP request: %w", err)}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return pathResult{err: fmt.Errorf("read the plain-HTTP answer: %w", err)}
	}
	if resp.StatusCode == http.StatusProxyAuthRequired {
		resp.Body.Close()
		return pathResult{err: errors.New("proxy refused the plain-HTTP request: 407 Proxy Authentication Required")}
	}
	return readAnswer(resp, client, "plain-HTTP request for the echo endpoint")
}

// checkRequest is the GET a probe sends on either path.
func checkRequest(target *url.URL) *http.Request {
	req := &http.Request{Method: http.MethodGet, URL: target, Host: target.Host, Header: http.Header{}, Close: true}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "application/json, */*;q=0.5")
	if u := target.User; u != nil {
		pw, _ := u.Password()
		req.SetBasicAuth(u.Username(), pw)
	}
	return req
}

// readAnswer reads a check answer and, when it is an echo reply, judges what it shows. what
// names the request in errors. Status lines are not quoted past their code (see fetch).
func readAnswer(resp *http.Response, client netip.Addr, what string) pathResult {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return pathResult{err: fmt.Errorf("read body of the %s: %w", what, err)}
	}
	if resp.StatusCode/100 != 2 {
		return pathResult{err: fmt.Errorf("%s answered %d %s", what, resp.StatusCode, http.StatusText(resp.StatusCode))}
	}
	res := pathResult{}
	if echo, ok := decodeEcho(resp.Header.Get("Content-Type"), body); ok {
		res.echo, res.egressIP = true, echo.IP
		res.leaked, res.anonymity = echo.judge(client)
	}
	return res
}

// writeConnect sends the CONNECT request, with the proxy credential when the spec has one.
func writeConnect(w io.Writer, authority string, auth *schemas.Auth) error {
	head := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\nUser-Agent: " + userAgent + "\r\n"
	if auth != nil {
		head += "Proxy-Authorization: " + basicAuth(auth) + "\r\n"
	}
	_, err := io.WriteString(w, head+"\r\n")
	return err
}

func basicAuth(auth *schemas.Auth) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(auth.Username+":"+auth.Password))
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
