package main

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

// Credentials come from the environment, never from flags (flags show in ps):
// EGRESSD_NATS_USER and EGRESSD_NATS_PASSWORD, EGRESSD_NATS_CA for a private CA. A user gets
// its own inbox prefix, _INBOX_<user>, so the server can keep users from reading each other's
// replies (deploy/nats/nats-server.conf).
const (
	envUser     = "EGRESSD_NATS_USER"
	envPassword = "EGRESSD_NATS_PASSWORD"
	envCA       = "EGRESSD_NATS_CA"
)

// defaultDialTimeout bounds a short-lived command's connect.
const defaultDialTimeout = 5 * time.Second

// dial connects a short-lived command (status, events, lease) to NATS.
func dial(serverURL, name string, timeout time.Duration, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := authOptions()
	if err != nil {
		return nil, err
	}
	opts = append(append(opts, nats.Name(name), nats.Timeout(timeout)), extra...)
	nc, err := nats.Connect(serverURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (is `egressd run` running?)", redactURL(serverURL), err)
	}
	return nc, nil
}

// authOptions are the connection options every egressd connection shares.
func authOptions() ([]nats.Option, error) {
	var opts []nats.Option
	if user := os.Getenv(envUser); user != "" {
		opts = append(opts, nats.UserInfo(user, os.Getenv(envPassword)), nats.CustomInboxPrefix("_INBOX_"+user))
	}
	if ca := os.Getenv(envCA); ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	return opts, nil
}

// redactURL hides a password written into a server URL, for logs and errors.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

func connect(url string, log *slog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	auth, err := authOptions()
	if err != nil {
		return nil, err
	}
	opts = append(append(opts, auth...),
		nats.Name("egressd "+identity()),
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			log.Warn("nats async error", "subject", subj, "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }),
	)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactURL(url), err)
	}
	return nc, nil
}

var processID = func() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%d", h, os.Getpid(), time.Now().UnixNano()%100000)
}()

func identity() string { return processID }
