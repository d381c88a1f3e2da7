package events

import "time"

// OpKind is what an op asks a provisioner to do.
type OpKind string

// Op kinds. Every op is idempotent: create ensures, get reads, delete removes until gone.
const (
	OpCreate OpKind = "create"
	OpGet    OpKind = "get"
	OpDelete OpKind = "delete"
)

// Op is one unit of provider work, on stream OPS_<provider>. It carries no user-data or
// credentials: the provisioner reads the spec from the proxies bucket and checks it still
// matches SpecHash, so a stale create is dropped rather than run on an old spec.
type Op struct {
	V            int       `json:"v"`
	ID           string    `json:"id"`
	Kind         OpKind    `json:"kind"`
	Proxy        string    `json:"proxy"`
	Provider     string    `json:"provider"`
	Host         string    `json:"host"`
	UID          string    `json:"uid"`
	InstanceName string    `json:"instanceName"`
	InstanceID   string    `json:"instanceId,omitempty"` // get and delete
	SpecRevision uint64    `json:"specRevision,omitempty"`
	SpecHash     string    `json:"specHash,omitempty"`   // create: the hash the spec must still have
	Generation   string    `json:"generation,omitempty"` // create: the instance's (ProxyStatus.Generation)
	IssuedAt     time.Time `json:"issuedAt"`
}

// MsgID is the Nats-Msg-Id of the op, so a repeated publish is dropped by the stream.
func (o Op) MsgID() string { return o.Proxy + ":" + o.ID }

// Instance is a provider instance as reported in an op result.
type Instance struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	State     string    `json:"state"`
	Address   string    `json:"address,omitempty"`
	Port      int       `json:"port,omitempty"`
	EgressIP  string    `json:"egressIp,omitempty"` // where its traffic leaves from, when the provider knows
	UID       string    `json:"uid,omitempty"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"` // its lifetime's end, from its own mark; zero: none
}

// OpResult is what a provisioner reports after running an op (an event of kind op).
type OpResult struct {
	V          int        `json:"v"`
	OpID       string     `json:"opId"`
	Kind       OpKind     `json:"kind"`
	Proxy      string     `json:"proxy"`
	Provider   string     `json:"provider"`
	Host       string     `json:"host"`
	Attempt    int        `json:"attempt"`
	Final      bool       `json:"final"` // false: the provisioner retries this op itself
	Instance   *Instance  `json:"instance,omitempty"`
	ErrorClass ErrorClass `json:"errorClass,omitempty"`
	Error      string     `json:"error,omitempty"`
	SpecHash   string     `json:"specHash,omitempty"` // create: the hash of what was created
	Worker     string     `json:"worker"`
	StartedAt  time.Time  `json:"startedAt"`
	At         time.Time  `json:"at"`
}
