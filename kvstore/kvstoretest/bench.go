package kvstoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// Latencies summarises one run of RunClients.
type Latencies struct {
	N         int
	P50, P99  time.Duration
	OpsPerSec float64
	CPU       time.Duration // per operation, as the run's cpu function counts it
}

// Report gives l's figures as benchmark metrics.
func (l Latencies) Report(b *testing.B) {
	b.ReportMetric(float64(l.P50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(l.P99.Microseconds()), "p99-µs")
	b.ReportMetric(l.OpsPerSec, "ops/s")
	b.ReportMetric(float64(l.CPU.Microseconds()), "cpu-µs/op")
}

// ReportAgainst gives l's figures as ratios to floor's, measured in the same run.
func (l Latencies) ReportAgainst(b *testing.B, floor Latencies) {
	if floor.N == 0 {
		return
	}
	b.ReportMetric(float64(l.P50)/float64(floor.P50), "p50/floor")
	b.ReportMetric(float64(l.P99)/float64(floor.P99), "p99/floor")
	b.ReportMetric(l.OpsPerSec/floor.OpsPerSec, "ops/floor")
	if floor.CPU > 0 {
		b.ReportMetric(float64(l.CPU)/float64(floor.CPU), "cpu/floor")
	}
}

// RunClients runs b.N operations spread over the clients, each its own goroutine (one
// crawler each), and returns the latency percentiles, the throughput and the CPU time per
// operation that cpu counts (the whole of what the run is measured on: this process, or it
// and the servers and roles it started).
func RunClients(b *testing.B, clients []*nats.Conn, cpu func() time.Duration, op func(*nats.Conn) error) Latencies {
	b.Helper()
	var next atomic.Int64
	per := make([][]time.Duration, len(clients))
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	b.ResetTimer()
	start, cpu0 := time.Now(), cpu()
	for i, nc := range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) && failed.Load() == nil {
				t0 := time.Now()
				if err := op(nc); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				per[i] = append(per[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed, used := time.Since(start), cpu()-cpu0
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	all := slices.Concat(per...)
	slices.Sort(all)
	return Latencies{N: len(all), P50: all[len(all)/2], P99: all[len(all)*99/100],
		OpsPerSec: float64(len(all)) / elapsed.Seconds(), CPU: used / time.Duration(len(all))}
}

// Request is one request-reply that fails on a service error too.
func Request(nc *nats.Conn, subject string, data []byte) error {
	m, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		return err
	}
	if e := m.Header.Get("Nats-Service-Error"); e != "" {
		return fmt.Errorf("%s: %s", subject, e)
	}
	return nil
}

// FloorSubjects are the subjects of FloorService's endpoints in a test of its own.
var FloorSubjects = [2]string{"bench.floor.create", "bench.floor.delete"}

// FloorService is the floor of the lease benchmarks: a micro service whose endpoints on
// subjects[0] and subjects[1] each make one KV call on the key in the request body, in the
// bucket bucketOf names (a lease shard): a Create with a one-minute TTL and a Delete, the two
// writes of an acquire and a release and nothing else. Keys never reused make each Create a
// single publish: the cheapest there is.
func FloorService(nc *nats.Conn, subjects [2]string, bucketOf func(key string) jetstream.KeyValue) (micro.Service, error) {
	svc, err := micro.AddService(nc, micro.Config{Name: "benchfloor", Version: "1.0.0"})
	if err != nil {
		return nil, err
	}
	handle := func(f func(ctx context.Context, key string) error) micro.Handler {
		return micro.HandlerFunc(func(req micro.Request) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := f(ctx, string(req.Data())); err != nil {
				_ = req.Error("500", err.Error(), nil)
				return
			}
			_ = req.Respond([]byte(`{}`))
		})
	}
	if err := svc.AddEndpoint("create", handle(func(ctx context.Context, key string) error {
		_, err := bucketOf(key).Create(ctx, key, []byte(`{"v":1}`), jetstream.KeyTTL(time.Minute))
		return err
	}), micro.WithEndpointSubject(subjects[0])); err != nil {
		return nil, err
	}
	if err := svc.AddEndpoint("delete", handle(func(ctx context.Context, key string) error {
		return bucketOf(key).Delete(ctx, key)
	}), micro.WithEndpointSubject(subjects[1])); err != nil {
		return nil, err
	}
	return svc, nil
}

// FloorOp is one client's floor cycle on FloorService's subjects: a create and a delete of a
// key of its own.
func FloorOp(subjects [2]string) func(*nats.Conn) error {
	var seq atomic.Int64
	return func(nc *nats.Conn) error {
		key := fmt.Sprintf("floor-%d.0", seq.Add(1))
		if err := Request(nc, subjects[0], []byte(key)); err != nil {
			return err
		}
		return Request(nc, subjects[1], []byte(key))
	}
}

// AwaitResponders asks subject from every client until each gets an answer (any answer): a
// responder's subscription reaches the other servers of a cluster over the routes a moment
// after it subscribed.
func AwaitResponders(t testing.TB, clients []*nats.Conn, subject, data string) {
	t.Helper()
	for _, nc := range clients {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			_, err := nc.Request(subject, []byte(data), 5*time.Second)
			if err == nil {
				break
			}
			if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
				t.Fatalf("%s from a client: %v", subject, err)
			}
		}
	}
}
