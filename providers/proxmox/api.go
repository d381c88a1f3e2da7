package proxmox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/providers"
)

// The endpoint map (docs/providers/proxmox.md, "What each call does"), one method per call. Each is one request with one log
// line; nothing here retries or classifies.

// resource is one entry of /cluster/resources?type=vm (F8). Name is empty mid-clone; Lock
// is set only while a task holds the VM.
type resource struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	VMID     int    `json:"vmid"`
	Name     string `json:"name"`
	Node     string `json:"node"`
	Status   string `json:"status"`
	Template int    `json:"template"`
	Tags     string `json:"tags"`
	Lock     string `json:"lock"`
}

func (r resource) hasTag(t string) bool {
	for _, x := range strings.FieldsFunc(r.Tags, func(c rune) bool { return c == ';' || c == ',' || c == ' ' }) {
		if strings.EqualFold(x, t) {
			return true
		}
	}
	return false
}

func (c *client) resources(ctx context.Context) ([]resource, error) {
	var out []resource
	err := c.do(ctx, call{method: http.MethodGet, path: "/cluster/resources", query: url.Values{"type": {"vm"}}}, &out)
	return out, err
}

func vmPath(node string, vmid int) string { return fmt.Sprintf("/nodes/%s/qemu/%d", node, vmid) }

// vmConfig is a VM's config as strings: PVE answers numbers for some keys and strings for
// others, and egressd reads only a few.
type vmConfig map[string]string

func (v *vmConfig) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(vmConfig, len(raw))
	for k, r := range raw {
		var s string
		if json.Unmarshal(r, &s) != nil {
			s = string(r)
		}
		out[k] = s
	}
	*v = out
	return nil
}

func (c *client) config(ctx context.Context, node string, vmid int) (vmConfig, error) {
	var out vmConfig
	err := c.do(ctx, call{method: http.MethodGet, path: vmPath(node, vmid) + "/config", node: node, vmid: strconv.Itoa(vmid)}, &out)
	return out, err
}

// setConfig is synchronous (PUT; POST would be a task).
func (c *client) setConfig(ctx context.Context, node string, vmid int, form url.Values) error {
	return c.do(ctx, call{method: http.MethodPut, path: vmPath(node, vmid) + "/config", form: form, node: node, vmid: strconv.Itoa(vmid)}, nil)
}

func (c *client) clone(ctx context.Context, node string, tmpl int, form url.Values) (string, error) {
	var upid string
	err := c.do(ctx, call{method: http.MethodPost, path: vmPath(node, tmpl) + "/clone", form: form, node: node,
		vmid: form.Get("newid"), storage: form.Get("storage")}, &upid)
	return upid, err
}

func (c *client) resize(ctx context.Context, node string, vmid int, disk string, gib int) (string, error) {
	var upid string
	err := c.do(ctx, call{method: http.MethodPut, path: vmPath(node, vmid) + "/resize",
		form: url.Values{"disk": {disk}, "size": {strconv.Itoa(gib) + "G"}}, node: node, vmid: strconv.Itoa(vmid)}, &upid)
	return upid, err
}

func (c *client) power(ctx context.Context, node string, vmid int, action string) (string, error) {
	var upid string
	err := c.do(ctx, call{method: http.MethodPost, path: vmPath(node, vmid) + "/status/" + action, form: url.Values{},
		node: node, vmid: strconv.Itoa(vmid)}, &upid)
	return upid, err
}

// vmStatus is status/current: paused is status running with qmpstatus paused (F14).
type vmStatus struct {
	Status    string `json:"status"`
	QMPStatus string `json:"qmpstatus"`
	Lock      string `json:"lock"`
}

func (c *client) status(ctx context.Context, node string, vmid int) (vmStatus, error) {
	var out vmStatus
	err := c.do(ctx, call{method: http.MethodGet, path: vmPath(node, vmid) + "/status/current", node: node, vmid: strconv.Itoa(vmid)}, &out)
	return out, err
}

func (c *client) destroy(ctx context.Context, node string, vmid int) (string, error) {
	var upid string
	err := c.do(ctx, call{method: http.MethodDelete, path: vmPath(node, vmid),
		query: url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}}, node: node, vmid: strconv.Itoa(vmid)}, &upid)
	return upid, err
}

// agentInterface is one NIC the guest agent reports (F21).
type agentInterface struct {
	Name        string `json:"name"`
	HWAddress   string `json:"hardware-address"`
	IPAddresses []struct {
		Address string `json:"ip-address"`
		Type    string `json:"ip-address-type"`
	} `json:"ip-addresses"`
}

func (c *client) interfaces(ctx context.Context, node string, vmid int) ([]agentInterface, error) {
	var out struct {
		Result []agentInterface `json:"result"`
	}
	err := c.do(ctx, call{method: http.MethodGet, path: vmPath(node, vmid) + "/agent/network-get-interfaces", node: node, vmid: strconv.Itoa(vmid)}, &out)
	return out.Result, err
}

// upload stores an ISO (F12: multipart content=iso and a file part; re-upload overwrites) and
// returns its imgcopy task.
func (c *client) upload(ctx context.Context, node, storage, filename string, data []byte, budget time.Duration) (string, error) {
	var upid string
	err := c.do(ctx, call{method: http.MethodPost, path: fmt.Sprintf("/nodes/%s/storage/%s/upload", node, storage),
		body: multipartISO(filename, data), budget: budget, node: node, storage: storage}, &upid)
	return upid, err
}

// deleteVolume removes a volume: an imgdel task, which also ends OK for a missing one (F13).
func (c *client) deleteVolume(ctx context.Context, node, storage, volid string) (string, error) {
	var upid string
	err := c.do(ctx, call{method: http.MethodDelete, path: fmt.Sprintf("/nodes/%s/storage/%s/content/%s", node, storage, url.PathEscape(volid)),
		node: node, storage: storage}, &upid)
	return upid, err
}

// taskStatus is a task's state (F16): exitstatus only once stopped; OK and "WARNINGS: n" succeed.
type taskStatus struct {
	Status     string `json:"status"`
	ExitStatus string `json:"exitstatus"`
}

func (c *client) task(ctx context.Context, node, upid string) (taskStatus, error) {
	var out taskStatus
	err := c.do(ctx, call{method: http.MethodGet, path: fmt.Sprintf("/nodes/%s/tasks/%s/status", node, url.PathEscape(upid)), node: node}, &out)
	return out, err
}

type version struct {
	Version string `json:"version"`
	Release string `json:"release"`
}

func (c *client) version(ctx context.Context) (version, error) {
	var out version
	err := c.do(ctx, call{method: http.MethodGet, path: "/version"}, &out)
	return out, err
}

type nodeStatus struct {
	KVersion   string `json:"kversion"`
	PVEVersion string `json:"pveversion"`
}

func (c *client) nodeStatus(ctx context.Context, node string) (nodeStatus, error) {
	var out nodeStatus
	err := c.do(ctx, call{method: http.MethodGet, path: "/nodes/" + node + "/status", node: node}, &out)
	return out, err
}

type storageStatus struct {
	Content string `json:"content"`
	Type    string `json:"type"`
	Avail   int64  `json:"avail"`
	Active  int    `json:"active"`
	Enabled int    `json:"enabled"`
}

func (c *client) storageStatus(ctx context.Context, node, storage string) (storageStatus, error) {
	var out storageStatus
	err := c.do(ctx, call{method: http.MethodGet, path: fmt.Sprintf("/nodes/%s/storage/%s/status", node, storage), node: node, storage: storage}, &out)
	return out, err
}

// taskError is a task that ended with an exit status other than OK or WARNINGS.
type taskError struct {
	upid string
	exit string
}

func (e *taskError) Error() string { return fmt.Sprintf("task %s ended: %s", e.upid, e.exit) }
func (e *taskError) Unwrap() error { return errTaskFailed }

// upidNode is the node a UPID names (UPID:<node>:…): where its status is read.
func upidNode(upid string) (string, error) {
	parts := strings.Split(upid, ":")
	if len(parts) < 8 || parts[0] != "UPID" || !providers.ValidName(parts[1]) {
		return "", fmt.Errorf("%w: %q is not a UPID", errBadAnswer, upid)
	}
	return parts[1], nil
}

// Task polling starts fast (a seed upload or a start in a simulator takes milliseconds) and
// backs off to PVE's UI rhythm of 2 s.
const (
	pollFirst = 100 * time.Millisecond
	pollMax   = 2 * time.Second
)

// wait polls a task until it stops, within budget. A task that ends badly is a taskError.
func (c *client) wait(ctx context.Context, upid string, budget time.Duration) error {
	node, err := upidNode(upid)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	for d := pollFirst; ; d = min(2*d, pollMax) {
		st, err := c.task(ctx, node, upid)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("waiting for task %s: %w", upid, context.Cause(ctx))
			}
			return err
		}
		if st.Status == "stopped" {
			if st.ExitStatus == "OK" || strings.HasPrefix(st.ExitStatus, "WARNINGS") {
				return nil
			}
			return &taskError{upid: upid, exit: st.ExitStatus}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("task %s still running after %s: %w", upid, budget, ctx.Err())
			}
			return ctx.Err()
		case <-time.After(d):
		}
	}
}
