package gcptest

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Firewall rules (https://cloud.google.com/compute/docs/reference/rest/v1/firewalls) are
// global. They are stored and listed back, never enforced: the proxies accept everyone on
// loopback. Their operations are DONE at once.

func (s *Server) firewallPath(name string) string {
	return fmt.Sprintf("projects/%s/global/firewalls/%s", s.opts.Project, name)
}

// insertFirewall: https://cloud.google.com/compute/docs/reference/rest/v1/firewalls/insert
func (s *Server) insertFirewall(w http.ResponseWriter, r *http.Request) {
	var fw computepb.Firewall
	if !decodeBody(w, r, &fw) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.project(w, r); !ok {
		return
	}
	name := fw.GetName()
	if !nameRE.MatchString(name) {
		writeError(w, invalid(fmt.Sprintf("Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", name)))
		return
	}
	if _, ok := s.firewalls[name]; ok {
		writeError(w, alreadyExists(s.firewallPath(name)))
		return
	}
	fw.Kind = proto.String("compute#firewall")
	fw.Id = proto.Uint64(s.id())
	fw.CreationTimestamp = proto.String(s.timestamp())
	fw.SelfLink = proto.String(selfLinkBase + s.firewallPath(name))
	if fw.Network == nil {
		fw.Network = proto.String("global/networks/default")
	}
	if !strings.HasPrefix(fw.GetNetwork(), "https://") {
		fw.Network = proto.String(selfLinkBase + "projects/" + s.opts.Project + "/" + fw.GetNetwork())
	}
	if fw.Direction == nil {
		fw.Direction = proto.String("INGRESS")
	}
	if fw.Priority == nil {
		fw.Priority = proto.Int32(1000)
	}
	s.firewalls[name] = &fw
	op := s.newOperation("", "insert", fw.GetSelfLink(), fw.GetId())
	s.running(op)
	s.finish(op, "", "", 0)
	writeJSON(w, proto.Clone(op.pb))
}

// lookupFirewall finds the rule the request names; on failure it has written the error.
// Callers hold s.mu.
func (s *Server) lookupFirewall(w http.ResponseWriter, r *http.Request) (*computepb.Firewall, bool) {
	if _, ok := s.project(w, r); !ok {
		return nil, false
	}
	fw, ok := s.firewalls[r.PathValue("name")]
	if !ok {
		writeError(w, notFound(s.firewallPath(r.PathValue("name"))))
	}
	return fw, ok
}

// getFirewall: https://cloud.google.com/compute/docs/reference/rest/v1/firewalls/get
func (s *Server) getFirewall(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fw, ok := s.lookupFirewall(w, r); ok {
		writeJSON(w, proto.Clone(fw))
	}
}

// deleteFirewall: https://cloud.google.com/compute/docs/reference/rest/v1/firewalls/delete
func (s *Server) deleteFirewall(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fw, ok := s.lookupFirewall(w, r)
	if !ok {
		return
	}
	delete(s.firewalls, fw.GetName())
	op := s.newOperation("", "delete", fw.GetSelfLink(), fw.GetId())
	s.running(op)
	s.finish(op, "", "", 0)
	writeJSON(w, proto.Clone(op.pb))
}

// listFirewalls: https://cloud.google.com/compute/docs/reference/rest/v1/firewalls/list, by
// name, one page, no filter.
func (s *Server) listFirewalls(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.project(w, r); !ok {
		return
	}
	if r.URL.Query().Get("filter") != "" {
		writeError(w, invalid("Invalid value for field 'filter': the simulator lists firewalls unfiltered."))
		return
	}
	out := &computepb.FirewallList{Kind: proto.String("compute#firewallList"),
		Id: proto.String("projects/" + s.opts.Project + "/global/firewalls"), SelfLink: proto.String(selfLinkBase + "projects/" + s.opts.Project + "/global/firewalls")}
	for _, name := range slices.Sorted(maps.Keys(s.firewalls)) {
		out.Items = append(out.Items, proto.Clone(s.firewalls[name]).(*computepb.Firewall))
	}
	writeJSON(w, out)
}
