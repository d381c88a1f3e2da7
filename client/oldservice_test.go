package client_test

import (
	"bytes"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go"
)

// A leaser of a release before requestId (a rolling upgrade: TestClusterRollingUpgrade's old
// roles) decodes strictly and answers 400 naming the field. The client, which generated the
// ID, sends the acquire again without it and gets the lease; an ID the caller chose is not
// dropped behind its back.
func TestAcquireFromALeaserBeforeRequestID(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var tries, withID atomic.Int32
	sub, err := nc.Subscribe(events.LeaseAcquireSubject, func(m *nats.Msg) {
		tries.Add(1)
		out := nats.NewMsg(m.Reply)
		var reply any = events.LeaseReply{Lease: events.LeaseGrant{ID: "px.0.0123456789abcdef", Proxy: "px", TTLSeconds: 60}}
		if bytes.Contains(m.Data, []byte(`"requestId"`)) {
			withID.Add(1)
			reply = events.ErrorReply{Error: events.ErrorDetail{Code: events.CodeBadRequest, Field: "requestId", Message: "requestId: unknown field"}}
			out.Header.Set("Nats-Service-Error-Code", "400") // as the service answers errors
			out.Header.Set("Nats-Service-Error", "requestId: unknown field")
		}
		out.Data, _ = json.Marshal(reply)
		_ = m.RespondMsg(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	c := client.New(nc, client.WithRequestTimeout(5*time.Second))
	g, err := c.AcquireOnce(t.Context(), client.AcquireOptions{TTL: time.Minute})
	if err != nil || g.Proxy != "px" {
		t.Fatalf("acquire from the old leaser: %+v, %v", g, err)
	}
	if tries.Load() != 2 || withID.Load() != 1 {
		t.Fatalf("%d tries, %d with a request ID: want the generated ID sent once, then the acquire without it", tries.Load(), withID.Load())
	}
	if _, err := c.AcquireOnce(t.Context(), client.AcquireOptions{TTL: time.Minute, RequestID: "mine"}); err == nil {
		t.Fatal("an acquire with the caller's own request ID was sent without it")
	}
}
