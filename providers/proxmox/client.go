package proxmox

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// client is a thin HTTP/1.1 client of the PVE API (api2/json). PVE speaks HTTP/1.1 only (F18),
// puts its error text in the status line (F1), answers {"data": …}, and takes form-encoded
// parameters. Why not go-proxmox: docs/providers/proxmox.md, "Client".
type client struct {
	base      string // <url>/api2/json
	tokenFile string
	http      *http.Client
	timeout   time.Duration // one request, unless the call says otherwise
	log       *slog.Logger
}

// Transport budgets (docs/providers/proxmox.md, "Client").
const (
	dialTimeout      = 10 * time.Second
	tlsTimeout       = 10 * time.Second
	idleTimeout      = 90 * time.Second
	idleConnsPerHost = 4
	maxErrorBody     = 64 << 10 // an error body is PVE's short envelope, or a proxy's page
	maxBody          = 16 << 20 // a success body: resources of a large cluster fit
)

func newClient(cfg settings, log *slog.Logger) (*client, error) {
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("caFile: %s holds no PEM certificate", cfg.CAFile)
		}
		tlsConf.RootCAs = pool
	}
	tlsConf.InsecureSkipVerify = cfg.InsecureSkipTLSVerify
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConf,
		TLSHandshakeTimeout:   tlsTimeout,
		ResponseHeaderTimeout: cfg.requestTimeout,
		IdleConnTimeout:       idleTimeout,
		MaxIdleConnsPerHost:   idleConnsPerHost,
		// HTTP/2 off: a non-nil empty map stops the transport from negotiating h2 (F18).
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
		ForceAttemptHTTP2: false,
	}
	return &client{
		base:      strings.TrimRight(cfg.URL, "/") + "/api2/json",
		tokenFile: cfg.TokenFile,
		// No client timeout: each call's context carries its budget, so an upload may take
		// longer than an ordinary request.
		http:    &http.Client{Transport: tr},
		timeout: cfg.requestTimeout,
		log:     log,
	}, nil
}

func (c *client) close() { c.http.CloseIdleConnections() }

// apiError is a non-2xx answer. Message is the body's "message" when it has one (PVE ≥ 5.2
// repeats the reason there, F1), else the reason phrase of the status line.
type apiError struct {
	Status  int
	Message string
	Errors  map[string]string // 400: per-parameter messages
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("PVE answered %d %s", e.Status, e.Message)
	for _, k := range slices.Sorted(maps.Keys(e.Errors)) {
		msg += fmt.Sprintf("; %s: %s", k, e.Errors[k])
	}
	return msg
}

// newAPIError reads a non-2xx answer: the reason phrase of the status line and the body's
// envelope {"data":null,"message":…,"errors":{…}}, either of which may be missing.
func newAPIError(status int, statusLine string, body []byte) *apiError {
	e := &apiError{Status: status}
	reason := strings.TrimSpace(strings.TrimPrefix(statusLine, strconv.Itoa(status)))
	var env struct {
		Message string         `json:"message"`
		Errors  map[string]any `json:"errors"`
	}
	if json.Unmarshal(body, &env) == nil {
		e.Message = strings.TrimSpace(env.Message)
		for k, v := range env.Errors {
			if e.Errors == nil {
				e.Errors = map[string]string{}
			}
			s, ok := v.(string)
			if !ok {
				b, _ := json.Marshal(v)
				s = string(b)
			}
			e.Errors[k] = strings.TrimSpace(s)
		}
	}
	if e.Message == "" {
		e.Message = reason
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// Token errors. Neither ever quotes the file's content.
var (
	errTokenUnreadable = errors.New("API token file unreadable")
	errTokenMalformed  = errors.New("API token malformed")
)

// token reads the token file. A missing file may be a secret still being mounted
// (Transient); content that is not <user>@<realm>!<tokenid>=<secret> never works (Permanent).
func (c *client) token() (string, error) {
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is config, the error is enough; never the content
		}
		return "", fmt.Errorf("%w: tokenFile %s: %w", errTokenUnreadable, c.tokenFile, err)
	}
	tok := strings.TrimSpace(string(b))
	user, rest, ok1 := strings.Cut(tok, "!")
	id, secret, ok2 := strings.Cut(rest, "=")
	if !ok1 || !ok2 || !strings.Contains(user, "@") || id == "" || secret == "" ||
		strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", fmt.Errorf("%w: tokenFile %s does not hold <user>@<realm>!<tokenid>=<secret> on one line", errTokenMalformed, c.tokenFile)
	}
	return tok, nil
}

// call is one API request, for the log line.
type call struct {
	method string
	path   string     // below /api2/json, without the query
	query  url.Values // GET and DELETE parameters
	form   url.Values // POST and PUT parameters
	budget time.Duration
	// body, when set, replaces form: a streamed multipart upload.
	body       func() (io.Reader, string)
	node, vmid string
	storage    string
}

// do runs one request and decodes the envelope's data into out (nil: ignored). Every request
// reads the token afresh and logs one line, never with the token or a body.
func (c *client) do(ctx context.Context, cl call, out any) (err error) {
	start := time.Now()
	status := 0
	defer func() {
		attrs := []any{"call", cl.method + " " + cl.path, "duration", time.Since(start), "httpStatus", status}
		for _, a := range [][2]string{{"node", cl.node}, {"vmid", cl.vmid}, {"storage", cl.storage}} {
			if a[1] != "" {
				attrs = append(attrs, a[0], a[1])
			}
		}
		if s, ok := out.(*string); ok && err == nil && strings.HasPrefix(*s, "UPID:") {
			attrs = append(attrs, "upid", *s)
		}
		if err != nil {
			attrs = append(attrs, "error", err.Error())
		}
		c.log.Debug("proxmox api call", attrs...)
	}()
	tok, err := c.token()
	if err != nil {
		return err
	}
	budget := cl.budget
	if budget == 0 {
		budget = c.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	req, err := c.request(ctx, cl, tok)
	if err != nil {
		return err
	}
	res, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the log line already; keep the cause
		}
		return fmt.Errorf("%s %s: %w", cl.method, cl.path, err)
	}
	defer res.Body.Close()
	status = res.StatusCode
	if status < 200 || status > 299 {
		b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		return fmt.Errorf("%s %s: %w", cl.method, cl.path, newAPIError(status, res.Status, b))
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", cl.method, cl.path, err)
	}
	if len(b) > maxBody {
		return fmt.Errorf("%s %s: the answer is over %d bytes", cl.method, cl.path, maxBody)
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%w: %s %s: the answer is not PVE's {\"data\": …}: %v", errBadAnswer, cl.method, cl.path, err)
	}
	if out == nil || len(env.Data) == 0 || bytes.Equal(env.Data, []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("%w: %s %s: %v", errBadAnswer, cl.method, cl.path, err)
	}
	return nil
}

// request builds cl's HTTP request with the token tok.
func (c *client) request(ctx context.Context, cl call, tok string) (*http.Request, error) {
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var body io.Reader
	ctype := ""
	switch {
	case cl.body != nil:
		body, ctype = cl.body()
	case cl.form != nil:
		body, ctype = strings.NewReader(cl.form.Encode()), "application/x-www-form-urlencoded"
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", errBadRequest, cl.method, cl.path, err)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+tok)
	req.Header.Set("Accept", "application/json")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return req, nil
}

// multipartISO is an upload body streamed through a pipe: the seed is never copied whole
// into a second buffer, and a cancelled request ends the writer.
func multipartISO(filename string, data []byte) func() (io.Reader, string) {
	return func() (io.Reader, string) {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			// Owned by the request: it ends when the transport has read the body or closed
			// the pipe's reader (done or cancelled), which makes every write below fail.
			err := mw.WriteField("content", "iso")
			if err == nil {
				var w io.Writer
				if w, err = mw.CreateFormFile("filename", filename); err == nil {
					_, err = w.Write(data)
				}
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
		return pr, mw.FormDataContentType()
	}
}
