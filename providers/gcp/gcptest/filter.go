package gcptest

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// labelTerm is one `labels.KEY = "VALUE"` of a filter.
type labelTerm struct{ key, value string }

// termRE is the one comparison modelled: label equality, the value quoted or bare
// (https://cloud.google.com/compute/docs/reference/rest/v1/instances/aggregatedList, filter).
var termRE = regexp.MustCompile(`^labels\.([a-z][a-z0-9_-]{0,62})\s*=\s*(?:"([^"]*)"|([^\s"()]+))$`)

// opTermRE is the comparison zoneOperations.list filters are modelled with: equality on
// targetLink, operationType or status.
var opTermRE = regexp.MustCompile(`^(targetLink|operationType|status)\s*=\s*(?:"([^"]*)"|([^\s"()]+))$`)

// maxFilter bounds a filter's length; the service's own bound is not documented.
const maxFilter = 4096

// parseFilter reads terms joined by AND, each optionally parenthesised:
//
//	labels.a = "x" AND labels.b=y
//	(labels.a = "x") AND (labels.b = "y")
//
// "" matches everything. Anything else is an error naming the filter.
func parseFilter(filter string) ([]labelTerm, error) { return parseTerms(filter, termRE) }

// parseOpFilter reads an operations filter: `targetLink = "URL" AND operationType = insert`.
func parseOpFilter(filter string) ([]labelTerm, error) { return parseTerms(filter, opTermRE) }

func parseTerms(filter string, re *regexp.Regexp) ([]labelTerm, error) {
	f := strings.TrimSpace(filter)
	if f == "" {
		return nil, nil
	}
	if len(f) > maxFilter {
		return nil, errors.New("filter is too long")
	}
	var terms []labelTerm
	for _, part := range strings.Split(f, " AND ") {
		p := strings.TrimSpace(part)
		for strings.HasPrefix(p, "(") && strings.HasSuffix(p, ")") {
			p = strings.TrimSpace(p[1 : len(p)-1])
		}
		m := re.FindStringSubmatch(p)
		if m == nil {
			return nil, fmt.Errorf("unsupported filter term %q", p)
		}
		v := m[2]
		if m[3] != "" {
			v = m[3]
		}
		terms = append(terms, labelTerm{key: m[1], value: v})
	}
	return terms, nil
}

func matches(labels map[string]string, terms []labelTerm) bool {
	for _, t := range terms {
		if v, ok := labels[t.key]; !ok || v != t.value {
			return false
		}
	}
	return true
}
