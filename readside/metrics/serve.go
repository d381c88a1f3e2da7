package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics, /healthz and /readyz. /healthz (liveness: restart me if it
// fails) is 200 while alive returns nil, /readyz (send me work) while ready does; 503 with
// the reason otherwise.
func (m *Metrics) Handler(alive, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Timeout: 10 * time.Second}))
	mux.HandleFunc("GET /healthz", verdict(alive, "unhealthy"))
	mux.HandleFunc("GET /readyz", verdict(ready, "not ready"))
	return mux
}

func verdict(check func() error, bad string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := check(); err != nil {
			http.Error(w, bad+": "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}

// Serve serves h on ln until ctx ends, then shuts down within a short budget.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close() // out of budget: cut the scrapes still running
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
