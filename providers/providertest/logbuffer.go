package providertest

import (
	"bytes"
	"log/slog"
	"sync"
)

// LogBuffer collects a provider's log lines at debug level, text-formatted, for tests that
// read them back (a secret must appear in none). It is safe for concurrent writers; the zero
// value is ready to use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

// String is everything logged so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Logger logs into the buffer at debug level.
func (l *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
