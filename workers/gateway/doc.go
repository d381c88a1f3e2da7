// Package gateway is the gateway role: one HTTP forward proxy endpoint that any HTTP client
// (curl -x, Python requests, Scrapy's HttpProxyMiddleware, Playwright, Go's
// http.ProxyFromEnvironment) points at, with the routing in the proxy username and a crawler
// token as the password (docs/gateway.md).
//
// It takes leases through the Go client (package client) over NATS like any crawler, never
// by importing the leaser: a session-less route holds at most one lease per proxy and hands
// them out least recently used first, a session holds the lease service's sticky session,
// so it survives a gateway restart and spans replicas. Leases renew while held and go back
// once idle; a gateway killed outright leaves them to run out at their TTL.
//
// CONNECT is chained through the leased proxy with the lease's credentials and stays a
// tunnel (no byte of it is read); plain HTTP is forwarded in absolute form, a request that
// may be sent again on the gateway's own kept connections to the proxy (upstream.go, decision
// 89), one with a body through net/http's Transport. Rules (status
// codes, a body marker on plain HTTP, failures to connect) report blocked or failed for the
// target through the client's report call, and a rotating idempotent request is retried once
// on another proxy. Answers the gateway makes itself carry RFC 9209 Proxy-Status; none of
// them, nor a log line or a metric, carries a fleet proxy's credentials.
package gateway
