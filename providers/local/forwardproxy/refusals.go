package forwardproxy

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	"github.com/egressd/egressd/providers/local/internal/atomicfile"
)

// refusalsEvery is how often the proxy writes its refusal counts when they changed. A variable
// so that tests can shorten it.
var refusalsEvery = 5 * time.Second

// Refusals is the file form of a proxy's refusal counts (--refusals-file): credentials refused
// since the proxy started, by reason (leaseauth.Reason, or "credentials"). The local provider
// sums its proxies' files for the metrics; nothing in it is a secret.
type Refusals struct {
	V       int              `json:"v"`
	Refused map[string]int64 `json:"refused"`
}

// ReadRefusals decodes a refusals file.
func ReadRefusals(data []byte) (Refusals, error) {
	var r Refusals
	err := json.Unmarshal(data, &r)
	return r, err
}

// writeRefusals writes the counts to path every refusalsEvery while they change, and once more
// when ctx ends, so that the last counts of a proxy that stops are on disk.
func (h *handler) writeRefusals(ctx context.Context, path string) {
	var last map[string]int64
	write := func() {
		now := h.auth.Refused()
		if last != nil && maps.Equal(now, last) {
			return
		}
		b, _ := json.Marshal(Refusals{V: 1, Refused: now})
		if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
			h.log.Warn("write the refusal counts", "path", path, "err", err)
			return
		}
		last = now
	}
	write()
	t := time.NewTicker(refusalsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			write()
			return
		case <-t.C:
			write()
		}
	}
}
