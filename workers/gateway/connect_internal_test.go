package gateway

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
)

// The proxy's answer to CONNECT is read, and whatever came after it in the same read (a site
// that speaks first: an SSH or SMTP banner) is handed on ahead of the connection's bytes.
func TestReadConnectAnswer(t *testing.T) {
	for _, c := range []struct {
		name, in string
		status   int
		early    string
		fail     bool
	}{
		{name: "tunnel", in: "HTTP/1.1 200 Connection established\r\n\r\n", status: 200},
		{name: "the site spoke first", in: "HTTP/1.1 200 Connection established\r\n\r\nSSH-2.0-x\r\n", status: 200, early: "SSH-2.0-x\r\n"},
		{name: "refused", in: "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 3\r\n\r\nno\n", status: 407},
		{name: "a long header line", in: "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", 3000) + "\r\n\r\nhi", status: 200, early: "hi"},
		{name: "not HTTP", in: "SSH-2.0-x\r\n", fail: true},
		{name: "cut short", in: "HTTP/1.1 200 Conn", fail: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, early, err := readConnectAnswer(bufio.NewReaderSize(strings.NewReader(c.in), 1024))
			if (err != nil) != c.fail || status != c.status || string(early) != c.early {
				t.Errorf("got %d %q %v, want %d %q (error %v)", status, early, err, c.status, c.early, c.fail)
			}
		})
	}
}

func TestEarlyConnReadsTheEarlyBytesFirst(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() { _, _ = io.WriteString(b, " and the rest"); b.Close() }()
	got, err := io.ReadAll(&earlyConn{Conn: a, early: []byte("banner")})
	if err != nil || string(got) != "banner and the rest" {
		t.Errorf("got %q %v", got, err)
	}
}
