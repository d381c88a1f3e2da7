package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startEmbedded starts the all-in-one's nats-server: JetStream on disk under dataDir, clients
// on listen (127.0.0.1:4222 by default, so the nats CLI works with no flags). The wait for
// it ends as soon as the server reports a fatal error (a port taken since checkNATSPort) or
// ctx ends (Ctrl-C), not at the end of its budget.
func startEmbedded(ctx context.Context, dataDir, listen string, log *slog.Logger) (*server.Server, error) {
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
	nl := &natsLog{log: log.With("component", "nats-server"), fatal: make(chan string, 1)}
	s.SetLoggerV2(nl, false, false, false)
	go s.Start()
	if err := waitReady(ctx, s, nl.fatal, embeddedStartBudget); err != nil {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats-server on %s: %w", listen, err)
	}
	return s, nil
}

// embeddedStartBudget bounds the store's recovery and the bind: a large store takes seconds.
const embeddedStartBudget = 60 * time.Second

// waitReady waits for s to accept clients, in short steps so a fatal report or ctx ends it.
func waitReady(ctx context.Context, s *server.Server, fatal <-chan string, budget time.Duration) error {
	deadline := time.Now().Add(budget)
	for !s.ReadyForConnections(100 * time.Millisecond) {
		select {
		case msg := <-fatal:
			return errors.New(msg)
		case <-ctx.Done():
			return fmt.Errorf("start interrupted: %w", ctx.Err())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready to accept clients within %s", budget)
		}
	}
	return nil
}

// natsLog sends the server's notices to slog at a level below ours, so a normal start is
// quiet and warnings still show. Its first fatal report is also handed to the start.
type natsLog struct {
	log   *slog.Logger
	fatal chan string
}

func (l *natsLog) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLog) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *natsLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	select {
	case l.fatal <- msg:
	default: // the start already has one, or is over
	}
}

func (l *natsLog) Errorf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *natsLog) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLog) Tracef(format string, v ...any) {}
