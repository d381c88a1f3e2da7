package reconciler

import (
	"encoding/json"
	"net"
	"strconv"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// scheduleProbes publishes one probe request per addressed proxy per health-check interval,
// and one at once for a proxy that just got an address. Probes are core NATS requests to a
// queue group: a missed one is simply the next interval's.
func (l *loop) scheduleProbes(now time.Time) {
	for name, e := range l.statuses {
		st := e.st
		se, ok := l.specs[name]
		if !ok || se.spec == nil || st.IP == "" || st.Port == 0 || st.Teardown != "" {
			delete(l.probeDue, name)
			continue
		}
		// A new address (a new or replaced instance) is probed at once, not an interval later.
		addr := net.JoinHostPort(st.IP, strconv.Itoa(st.Port))
		due, scheduled := l.probeDue[name]
		fresh := l.probeAddr[name] != addr
		if scheduled && now.Before(due) && !fresh {
			continue
		}
		reason := "interval"
		if fresh {
			reason = "new"
		}
		l.probeAddr[name] = addr
		l.probeDue[name] = now.Add(time.Duration(se.spec.HealthCheck.IntervalSeconds) * time.Second)
		l.publishProbe(name, st, reason, now)
	}
	for name := range l.probeDue {
		if _, ok := l.statuses[name]; !ok {
			delete(l.probeDue, name)
			delete(l.probeAddr, name)
		}
	}
}

func (l *loop) publishProbe(name string, st events.ProxyStatus, reason string, now time.Time) {
	provider, host := st.Provider, st.Host
	if st.Mode == schemas.ModeExternal {
		provider, host = events.External, events.External
	}
	req := events.ProbeRequest{V: 1, Proxy: name, Provider: provider, Host: host, Address: st.IP, Port: st.Port, Reason: reason, At: now.UTC()}
	b, _ := json.Marshal(req)
	if err := l.r.cfg.NC.Publish(events.ProbeSubject(provider, host, name), b); err != nil {
		l.log.Warn("publish probe", "proxy", name, "err", err)
	}
}
