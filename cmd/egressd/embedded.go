package main

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startEmbedded starts the all-in-one's nats-server: JetStream on disk under dataDir, clients
// on listen (127.0.0.1:4222 by default, so the nats CLI works with no flags).
func startEmbedded(dataDir, listen string, log *slog.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--nats-listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("--nats-listen %q: bad port", listen)
	}
	opts := &server.Options{
		ServerName: "egressd",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Join(dataDir, "nats"),
		NoSigs:     true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	s.SetLoggerV2(&natsLog{log: log.With("component", "nats-server")}, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server did not start on %s (is the port in use?)", listen)
	}
	return s, nil
}

// natsLog sends the server's notices to slog at a level below ours, so a normal start is
// quiet and warnings still show.
type natsLog struct{ log *slog.Logger }

func (l *natsLog) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLog) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *natsLog) Fatalf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *natsLog) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *natsLog) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLog) Tracef(format string, v ...any)  {}
