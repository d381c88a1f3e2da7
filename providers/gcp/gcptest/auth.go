package gcptest

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// TokenPath is the OAuth 2.0 token endpoint the simulator serves: a service-account key
// file's token_uri pointed at URL()+TokenPath makes the real client exchange a signed JWT
// for an access token here (https://developers.google.com/identity/protocols/oauth2/service-account#httprest).
const TokenPath = "/token"

// Auth makes the simulator require a bearer token, as the service does: the API answers 401
// without it. The token endpoint issues Token for a JWT assertion whose RS256 signature
// Key verifies and whose iss is Email.
type Auth struct {
	Email string
	Key   *rsa.PublicKey
	Token string
}

// SetAuth replaces the accepted credential (a rotated key: the old token stops working).
func (s *Server) SetAuth(a Auth) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Auth = &a
	s.token = a.Token
}

// TokensIssued is how many access tokens the token endpoint issued.
func (s *Server) TokensIssued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued
}

func (s *Server) authorized(r *http.Request) bool {
	s.mu.Lock()
	want := s.token
	s.mu.Unlock()
	if want == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// issueToken is the jwt-bearer grant of RFC 7523: grant_type and assertion, form-encoded.
func (s *Server) issueToken(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	a := s.opts.Auth
	s.mu.Unlock()
	fail := func(desc string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant", "error_description": desc})
	}
	if a == nil {
		fail("no credentials are configured")
		return
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		fail("Invalid grant_type.")
		return
	}
	if !verifyAssertion(r.PostForm.Get("assertion"), a, time.Now()) {
		fail("Invalid JWT Signature.")
		return
	}
	s.mu.Lock()
	s.issued++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": a.Token, "token_type": "Bearer", "expires_in": 3600})
}

// verifyAssertion checks an RS256 JWT's signature, issuer and expiry.
func verifyAssertion(jwt string, a *Auth, now time.Time) bool {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 || a.Key == nil {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return false
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(a.Key, crypto.SHA256, sum[:], sig) != nil {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var claims struct {
		Iss string `json:"iss"`
		Exp int64  `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return false
	}
	return claims.Iss == a.Email && claims.Exp > now.Unix()
}
