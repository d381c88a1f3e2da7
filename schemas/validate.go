package schemas

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// FieldError is a problem with one field of a document.
type FieldError struct {
	Field   string // JSON path, e.g. "healthCheck.intervalSeconds"
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

var dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ValidName checks that name is a DNS-1123 label: lowercase letters, digits and '-', starting
// and ending with a letter or digit, at most 63 characters.
func ValidName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > 63:
		return fmt.Errorf("must be at most 63 characters, has %d", len(name))
	case !dns1123.MatchString(name):
		return fmt.Errorf("%q is not a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit)", name)
	}
	return nil
}

// cloudInitKey is what a cloud_init bucket key may be (the KV key alphabet, no dots at the ends).
var cloudInitKey = regexp.MustCompile(`^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*$`)

// Validate checks a spec whose defaults are applied; all problems are joined.
func (s ProxySpec) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if s.V != 1 {
		errs = append(errs, versionError(s.V))
	}
	if s.Port < 1 || s.Port > 65535 {
		bad("port", "must be between 1 and 65535, got %d", s.Port)
	}
	switch s.Mode {
	case ModeManaged:
		if s.Provider == "" {
			bad("provider", "is required for a managed proxy")
		} else if err := ValidName(s.Provider); err != nil {
			bad("provider", "%v", err)
		}
		if s.Endpoint != nil {
			bad("endpoint", "is only for mode %q", ModeExternal)
		}
		if s.CloudInit != "" && s.CloudInitRef != "" {
			bad("cloudInitRef", "cannot be set together with cloudInit")
		}
		if s.CloudInitRef != "" && !cloudInitKey.MatchString(s.CloudInitRef) {
			// Not quoted: user-data pasted here by mistake must not reach the status.
			bad("cloudInitRef", "is not a valid cloud_init key (letters, digits, '-', '/', '_', '=', separated by single dots)")
		}
	case ModeExternal:
		if s.Endpoint == nil || s.Endpoint.Host == "" {
			bad("endpoint.host", "is required for an external proxy")
		} else if strings.ContainsAny(s.Endpoint.Host, " /@") {
			// Not quoted: "user:password@host" is a likely mistake here.
			bad("endpoint.host", "is not a host name or IP address (no spaces, '/' or '@'; credentials go in auth)")
		}
		if s.Endpoint != nil && (s.Endpoint.Port < 1 || s.Endpoint.Port > 65535) {
			bad("endpoint.port", "must be between 1 and 65535, got %d", s.Endpoint.Port)
		}
		if s.Provider != "" {
			bad("provider", "must be empty for an external proxy")
		}
		if s.Placement != (Placement{}) {
			bad("placement", "must be empty for an external proxy")
		}
		if s.CloudInit != "" {
			bad("cloudInit", "must be empty for an external proxy")
		}
		if s.CloudInitRef != "" {
			bad("cloudInitRef", "must be empty for an external proxy")
		}
		if s.MaxLifetimeSeconds != 0 {
			bad("maxLifetimeSeconds", "must be 0 for an external proxy (egressd makes no instance to end)")
		}
	default:
		bad("mode", "must be %q or %q, got %q", ModeManaged, ModeExternal, s.Mode)
	}
	if a := s.Auth; a != nil {
		switch a.Mode {
		case "", AuthStatic:
			if a.Username == "" || strings.ContainsAny(a.Username, ":\r\n") {
				bad("auth.username", "must be non-empty and contain no ':' or line breaks")
			}
			if a.Password == "" {
				bad("auth.password", "must not be empty")
			}
		case AuthLease:
			// Each lease gets credentials of its own; a static pair here would be ignored,
			// and a password nobody uses is one that leaks for nothing.
			if a.Username != "" {
				bad("auth.username", "must be empty with auth.mode %q (each lease carries its own)", AuthLease)
			}
			if a.Password != "" {
				bad("auth.password", "must be empty with auth.mode %q (each lease carries its own)", AuthLease)
			}
		default:
			bad("auth.mode", "must be %q or %q, got %q", AuthStatic, AuthLease, a.Mode)
		}
	}
	// Sorted, so that the message (and so the status written from it) is the same every time.
	badKey := false
	for _, k := range slices.Sorted(maps.Keys(s.Attributes)) {
		badKey = badKey || k == "" || utf8.RuneCountInString(k) > 63
		if utf8.RuneCountInString(s.Attributes[k]) > 256 {
			bad("attributes."+k, "must be at most 256 characters")
		}
	}
	if badKey {
		bad("attributes", "keys must be 1 to 63 characters")
	}
	if l := s.MaxLifetimeSeconds; l != 0 && (l < MinLifetimeSeconds || l > MaxLifetimeSeconds) {
		bad("maxLifetimeSeconds", "must be 0 (the provider's default) or between %d and %d, got %d", MinLifetimeSeconds, MaxLifetimeSeconds, l)
	}
	if s.MaxLeases != nil && (*s.MaxLeases < 0 || *s.MaxLeases > 10000) {
		bad("maxLeases", "must be between 0 and 10000, got %d", *s.MaxLeases)
	}
	if s.Pool != "" {
		if err := ValidPoolName(s.Pool); err != nil {
			bad("pool", "%v", err)
		}
	}
	h := s.HealthCheck
	if h.IntervalSeconds < 1 || h.IntervalSeconds > 3600 {
		bad("healthCheck.intervalSeconds", "must be between 1 and 3600, got %d", h.IntervalSeconds)
	}
	intervalOK := h.IntervalSeconds >= 1 && h.IntervalSeconds <= 3600
	if intervalOK && (h.TimeoutSeconds < 1 || h.TimeoutSeconds > h.IntervalSeconds) {
		bad("healthCheck.timeoutSeconds", "must be between 1 and intervalSeconds (%d), got %d", h.IntervalSeconds, h.TimeoutSeconds)
	} else if !intervalOK && (h.TimeoutSeconds < 1 || h.TimeoutSeconds > 3600) {
		bad("healthCheck.timeoutSeconds", "must be between 1 and 3600, got %d", h.TimeoutSeconds)
	}
	if h.FailureThreshold < 1 || h.FailureThreshold > 100 {
		bad("healthCheck.failureThreshold", "must be between 1 and 100, got %d", h.FailureThreshold)
	}
	if h.SuccessThreshold < 1 || h.SuccessThreshold > 100 {
		bad("healthCheck.successThreshold", "must be between 1 and 100, got %d", h.SuccessThreshold)
	}
	switch h.RequireAnonymity {
	case AnonymityNone, AnonymityAnonymous, AnonymityElite:
	default:
		bad("healthCheck.requireAnonymity", "must be %q, %q or %q, got %q", AnonymityNone, AnonymityAnonymous, AnonymityElite, h.RequireAnonymity)
	}
	if e := s.Endpoint; e != nil && e.ExpectedEgress != "" {
		if _, err := netip.ParseAddr(e.ExpectedEgress); err != nil {
			bad("endpoint.expectedEgress", "must be an IP address")
		}
	}
	if h.URL != "" {
		u, err := url.Parse(h.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("healthCheck.url", "must be an absolute http or https URL")
		}
	}
	return errors.Join(errs...)
}

func versionError(v int) error {
	return &FieldError{Field: "v", Problem: fmt.Sprintf("unsupported version %d (this egressd understands 1)", v)}
}
