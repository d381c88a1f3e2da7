// Package provisioner runs one provider's ops: it pulls from the per-host consumers of
// OPS_<provider> (whose MaxAckPending is the host's limit), runs each op under a per-proxy
// lock with heartbeats, publishes the result as an event, and settles the message from the
// error class. It also publishes the provider's catalog.
package provisioner
