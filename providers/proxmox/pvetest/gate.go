package pvetest

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

const apiPrefix = "/api2/json"

// gate does what pveproxy does before any handler: authentication (F22), proxying to the
// named node (down: 595/596), and counts the call by its route.
func (s *Server) gate(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e := s.authenticate(r); e != nil {
			writeError(w, e)
			return
		}
		_, pattern := mux.Handler(r)
		route := strings.Replace(pattern, apiPrefix, "", 1)
		s.mu.Lock()
		s.calls[route]++
		node, onNode := pathNode(r.URL.Path)
		code, isDown := s.down[node]
		known := !onNode || s.knownNode(node)
		s.mu.Unlock()
		switch {
		case onNode && !known:
			writeError(w, errorf(http.StatusInternalServerError,
				"hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", node, node))
			return
		case onNode && isDown:
			writeError(w, nodeDownError(code))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// nodeDownError is pveproxy's answer when it cannot reach the node a call is proxied to: the
// AnyEvent::HTTP pseudo-status with its text in the reason phrase and no body.
func nodeDownError(code int) *apiError {
	msg := "No route to host"
	if code == StatusTimedOut {
		msg = "Connection timed out"
	}
	return &apiError{status: code, message: msg, emptyBody: true}
}

// pathNode is the {node} of /api2/json/nodes/{node}/....
func pathNode(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, apiPrefix+"/nodes/")
	if !ok {
		return "", false
	}
	node, _, _ := strings.Cut(rest, "/")
	return node, node != ""
}

// knownNode reports whether n is a configured node. Callers hold s.mu (or need not: Nodes
// never changes).
func (s *Server) knownNode(n string) bool {
	for _, x := range s.opts.Nodes {
		if x == n {
			return true
		}
	}
	return false
}

// authenticate checks the API token header on every request (F22): none (or not a token) →
// 401 No ticket; unknown token or wrong secret → 401 Authentication failed!.
func (s *Server) authenticate(r *http.Request) *apiError {
	h := r.Header.Get("Authorization")
	value, ok := strings.CutPrefix(h, "PVEAPIToken=")
	if !ok {
		return &apiError{status: http.StatusUnauthorized, message: msgNoTicket, emptyBody: true}
	}
	failed := &apiError{status: http.StatusUnauthorized, message: msgAuthFailed, emptyBody: true}
	bang := strings.IndexByte(value, '!')
	if bang < 0 {
		return failed
	}
	eq := strings.IndexByte(value[bang:], '=')
	if eq < 0 {
		return failed
	}
	id, secret := value[:bang+eq], value[bang+eq+1:]
	for _, t := range s.opts.Tokens {
		if t.ID == id && subtle.ConstantTimeCompare([]byte(t.Secret), []byte(secret)) == 1 {
			return nil
		}
	}
	return failed
}

// caller is the authenticated token's user@realm and tokenid, for UPIDs and task status.
func (s *Server) caller(r *http.Request) (user, tokenID string) {
	value := strings.TrimPrefix(r.Header.Get("Authorization"), "PVEAPIToken=")
	full, _, _ := strings.Cut(value, "=")
	user, tokenID, _ = strings.Cut(full, "!")
	return user, tokenID
}

// Calls is how many requests reached route, authenticated, whatever the answer: route is the
// method and path pattern after /api2/json, e.g. "POST /nodes/{node}/qemu/{vmid}/clone",
// "GET /cluster/resources", "PUT /nodes/{node}/qemu/{vmid}/config".
func (s *Server) Calls(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[route]
}
