// Package prober checks proxies through themselves. Probers divide the fleet among themselves
// (presence records in egress_probers, rendezvous hashing over the probers whose filters take
// a proxy) and each schedules its share, every proxy once per interval at a phase derived
// from its name, with a bounded pool of workers that never drops a due probe. A probe opens a
// real CONNECT tunnel through the proxy to the check URL and, at the same time, hands the
// proxy a plain-HTTP request for the echo endpoint to forward (the one path on which a proxy
// can add headers). The CONNECT path decides health; what the echo endpoint saw on each path
// gives an anonymity verdict (transparent, anonymous, elite). The record, with the spec's
// thresholds applied, goes to proxy_health with a TTL of three probe intervals so that a
// proxy nobody probes reads as unknown. Health transitions and anonymity changes are
// published on EGRESS_EVENTS, and so is a prober falling behind its schedule. Probe-now requests (core NATS, queue group "probers") probe a proxy at once.
//
// It also holds the echo endpoint egressd serves as the default check URL: it answers with
// the address the request came from and the headers it received, so a probe learns the
// proxy's egress IP and whether the proxy leaks Via, X-Forwarded-For or credentials.
package prober
