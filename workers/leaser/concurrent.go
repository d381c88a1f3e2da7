package leaser

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// maxConcurrent bounds the requests one replica serves at once over NATS. A micro endpoint
// calls its handler for one message at a time, so each request used to wait for the KV round
// trips of every request before it: a replica's rate was one over that round trip, whatever
// its cores (decision 99). Requests run side by side, as the HTTP face always ran them: every
// write they make is exact on its own (a Create, or a write at a revision). Past the bound
// the subscription waits, as it did for each request before, and NATS holds the rest in the
// subscription's pending buffer.
const maxConcurrent = 8

// gate runs the requests of the NATS endpoints on a fixed set of worker goroutines it owns.
// Workers rather than a goroutine per request: a new goroutine starts on a small stack and
// grows it by copying on every request (selection's ordered sets are walked recursively),
// which cost about as much CPU as the concurrency saved; a worker's stack has grown once.
type gate struct {
	mu     sync.RWMutex // held for reading while a request is handed over; closing takes it
	closed bool
	work   chan func()
	wg     sync.WaitGroup
}

// newGate starts n workers.
func newGate(n int) *gate {
	g := &gate{work: make(chan func())}
	for range n {
		g.wg.Go(func() {
			for f := range g.work {
				f()
			}
		})
	}
	return g
}

// run hands f to an idle worker, waiting for one when all n are busy (the subscription then
// waits, as it did for each request before). Once g is closed, f runs in the caller: a
// request the subscription's drain delivers late.
func (g *gate) run(f func()) {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		f()
		return
	}
	g.work <- f
	g.mu.RUnlock()
}

// close makes run call its f in place from now on, and waits until the workers have finished
// the requests they hold (each ends within its request's budget) and returned.
func (g *gate) close() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.work)
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// concurrently serves each request of h through l's gate. l.inflight counts the request
// from its delivery, so stop's drain waits for it as for one served in place. The handler
// gets a detached copy of the request: micro reads its request's outcome for the endpoint's
// statistics as soon as the callback returns, so the request it passed must not be answered
// later. The endpoint's statistics ($SRV.STATS) therefore count each request but not its
// errors nor its time; the leaser's own metrics (Observer) have both.
func (l *Leaser) concurrently(h micro.Handler) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		l.inflight.Add(1)
		d := &detached{nc: l.cfg.NC, subject: req.Subject(), reply: req.Reply(), data: req.Data(), headers: req.Headers()}
		l.gate.run(func() {
			defer l.inflight.Add(-1)
			h.Handle(d)
		})
	})
}

// detached is a micro.Request answered on its own, as micro answers one: a reply to its
// reply subject, an error as the Nats-Service-Error headers.
type detached struct {
	nc             *nats.Conn
	subject, reply string
	data           []byte
	headers        micro.Headers
}

func (d *detached) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Data: data}
	for _, opt := range opts {
		opt(m)
	}
	return d.send(m)
}

func (d *detached) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return d.Respond(b, opts...)
}

func (d *detached) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if code == "" || description == "" {
		return fmt.Errorf("%w: error code and description", micro.ErrArgRequired)
	}
	m := &nats.Msg{Header: nats.Header{micro.ErrorHeader: {description}, micro.ErrorCodeHeader: {code}}}
	for _, opt := range opts {
		opt(m)
	}
	m.Data = data
	return d.send(m)
}

func (d *detached) send(m *nats.Msg) error {
	if d.reply == "" {
		return fmt.Errorf("%w: %w", micro.ErrRespond, nats.ErrMsgNoReply)
	}
	m.Subject = d.reply
	if err := d.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("%w: %w", micro.ErrRespond, err)
	}
	return nil
}

func (d *detached) Data() []byte           { return d.data }
func (d *detached) Headers() micro.Headers { return d.headers }
func (d *detached) Subject() string        { return d.subject }
func (d *detached) Reply() string          { return d.reply }
