package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// nats-server v2.15.3 places a new R3 stream's leader on a random online peer and never moves
// it on its own, and a stream's placement may not name a preferred server ("preferred server
// not permitted in placement"). What it does take is a preferred leader in a leader step-down
// request ($JS.API.STREAM.LEADER.STEPDOWN.<stream> with {"placement":{"preferred":"<server>"}},
// server/jetstream_api.go getStepDownPreferredPlacement). So setup spreads the shards'
// leaders after declaring them, and the leading reconciler spreads them again whenever a
// crash left one server leading several (workers/reconciler, spread.go).

// stepDownBudget bounds the wait for one shard's new leader.
const stepDownBudget = 10 * time.Second

// SpreadLeaseLeaders moves the stream leaders of the lease shards onto different servers
// where the peers allow, fewest moves first (a shard keeps a leader no other shard before it
// has), and returns each shard's leader afterwards and how many it moved. On a single
// server it moves nothing. Only a peer that is current and online takes a leader, so a server
// that has just come back is given one once it has caught up.
func SpreadLeaseLeaders(ctx context.Context, js jetstream.JetStream, s LeaseShards) (leaders []string, moved int, err error) {
	leaders = make([]string, s.Len())
	used := map[string]int{}
	for i, kv := range s.All() {
		stream := "KV_" + kv.Bucket()
		ci, err := clusterInfo(ctx, js, stream)
		if err != nil {
			return nil, moved, err
		}
		if ci == nil || ci.Leader == "" || len(ci.Replicas) == 0 {
			continue // one server, or no leader right now: nothing to choose
		}
		best := ci.Leader
		for _, p := range ci.Replicas {
			if p.Current && !p.Offline && used[p.Name] < used[best] {
				best = p.Name
			}
		}
		if best != ci.Leader {
			if err := stepDown(ctx, js, stream, best); err != nil {
				return nil, moved, err
			}
			moved++
		}
		leaders[i] = best
		used[best]++
	}
	return leaders, moved, nil
}

func clusterInfo(ctx context.Context, js jetstream.JetStream, stream string) (*jetstream.ClusterInfo, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	return info.Cluster, nil
}

// stepDown asks stream's leader to hand over to server and waits until it has.
func stepDown(ctx context.Context, js jetstream.JetStream, stream, server string) error {
	ctx, cancel := context.WithTimeout(ctx, stepDownBudget)
	defer cancel()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	m, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, req)
	if err != nil {
		return fmt.Errorf("step down the leader of %s for %s: %w", stream, server, err)
	}
	var resp struct {
		Success bool                `json:"success"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("step down the leader of %s: reply: %w", stream, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("step down the leader of %s for %s: %w", stream, server, resp.Error)
	}
	for {
		ci, err := clusterInfo(ctx, js, stream)
		if err == nil && ci != nil && ci.Leader == server {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s did not become leader: %w", stream, server, errors.Join(ctx.Err(), err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
