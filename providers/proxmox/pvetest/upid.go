package pvetest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// UPID is a PVE task ID's parts (PVE::Tools::upid_encode):
//
//	UPID:<node>:<pid 8 hex>:<pstart 8 hex>:<starttime 8 hex>:<type>:<id>:<user>:
//
// e.g. UPID:pve1:000A1B2C:0123ABCD:674C5E10:qmclone:9000:egressd@pve!prov: — id is the
// source VMID for qmclone, the VMID for qmstart, empty for imgcopy, the storage for imgdel;
// user is user@realm, with !tokenid for a token.
type UPID struct {
	Node      string
	PID       uint32
	PStart    uint32
	StartTime uint32 // Unix seconds
	Type      string
	ID        string
	User      string
}

// String encodes u.
func (u UPID) String() string {
	return fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", u.Node, u.PID, u.PStart, u.StartTime, u.Type, u.ID, u.User)
}

// ParseUPID decodes s, strictly: the prefix, eight fields, three of them hexadecimal, the
// trailing colon, and a node, type and user that are not empty. The id may be empty.
func ParseUPID(s string) (UPID, error) {
	rest, ok := strings.CutPrefix(s, "UPID:")
	if !ok {
		return UPID{}, errors.New("upid: no UPID: prefix")
	}
	rest, ok = strings.CutSuffix(rest, ":")
	if !ok {
		return UPID{}, errors.New("upid: no trailing colon")
	}
	f := strings.Split(rest, ":")
	if len(f) != 7 {
		return UPID{}, fmt.Errorf("upid: %d fields, want 7", len(f))
	}
	var nums [3]uint32
	for i, name := range []string{"pid", "pstart", "starttime"} {
		v := f[1+i]
		if len(v) != 8 {
			return UPID{}, fmt.Errorf("upid: %s is not 8 hex digits", name)
		}
		n, err := strconv.ParseUint(v, 16, 32)
		if err != nil {
			return UPID{}, fmt.Errorf("upid: %s is not 8 hex digits", name)
		}
		nums[i] = uint32(n)
	}
	u := UPID{Node: f[0], PID: nums[0], PStart: nums[1], StartTime: nums[2], Type: f[4], ID: f[5], User: f[6]}
	switch {
	case !nodeRE.MatchString(u.Node):
		return UPID{}, errors.New("upid: bad node")
	case u.Type == "" || strings.ContainsAny(u.Type, " \t\r\n"):
		return UPID{}, errors.New("upid: bad type")
	case u.User == "" || strings.ContainsAny(u.User, " \t\r\n"):
		return UPID{}, errors.New("upid: bad user")
	}
	return u, nil
}
