package kvstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A declaration tries again after a try that found no answer, and not after a refusal.
func TestDeclareRetriesOnlyWhatAnotherTryCanMend(t *testing.T) {
	refused := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamNameInUse, Description: "stream name already in use with a different configuration"}
	noPeers := &jetstream.APIError{Code: 400, ErrorCode: errCodeNoPeers, Description: "no suitable peers for placement, peer offline"}
	for _, c := range []struct {
		name      string
		errs      []error // the tries' errors in turn; a try past the list succeeds
		wantTries int
		wantErr   error
	}{
		{"at once", nil, 1, nil},
		{"a lost reply, then an answer", []error{context.DeadlineExceeded}, 2, nil},
		{"no JetStream yet, twice", []error{nats.ErrNoResponders, nats.ErrTimeout}, 3, nil},
		{"a peer offline for a moment", []error{fmt.Errorf("declare: %w", noPeers)}, 2, nil},
		{"a refusal is final", []error{refused}, 1, refused},
	} {
		t.Run(c.name, func(t *testing.T) {
			tries := 0
			_, err := declare(context.Background(), func(ctx context.Context) (int, error) {
				if _, ok := ctx.Deadline(); !ok {
					t.Error("a try without a budget")
				}
				tries++
				if tries <= len(c.errs) {
					return 0, c.errs[tries-1]
				}
				return 1, nil
			})
			if tries != c.wantTries || !errors.Is(err, c.wantErr) {
				t.Errorf("%d tries, err %v; want %d, %v", tries, err, c.wantTries, c.wantErr)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := declare(ctx, func(context.Context) (int, error) { return 0, nats.ErrTimeout }); !errors.Is(err, nats.ErrTimeout) {
		t.Errorf("a declaration past its budget: %v", err)
	}
}
