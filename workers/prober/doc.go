// Package prober checks proxies through themselves. It takes the probe requests the
// reconciler's scheduler publishes (core NATS, queue group "probers", optionally only for some
// providers or hosts), opens a real CONNECT tunnel through the proxy to the check URL, and
// writes the verdict with the spec's thresholds applied to proxy_health, each record with a
// TTL of three probe intervals so that a proxy nobody probes reads as unknown. Health
// transitions are published on EGRESS_EVENTS.
//
// It also holds the echo endpoint egressd serves as the default check URL: it answers with
// the address the request came from and the headers it received, so a probe learns the
// proxy's egress IP and whether the proxy leaks Via, X-Forwarded-For or credentials.
package prober
