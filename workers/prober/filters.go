package prober

import (
	"fmt"
	"strings"

	"github.com/egressd/egressd/events"
)

// subjects turns filters ("provider" or "provider.host") into the probe subjects to subscribe
// to; no filter means every probe. A filter only narrows what this prober takes: an
// unfiltered prober in the same queue group still takes its share of every subject.
func subjects(filters []string) ([]string, error) {
	if len(filters) == 0 {
		return []string{events.ProbeSubjects}, nil
	}
	out := make([]string, 0, len(filters))
	seen := map[string]bool{}
	for _, f := range filters {
		tokens := strings.Split(f, ".")
		for _, tok := range tokens {
			if !validToken(tok) {
				return nil, fmt.Errorf("probe filter %q: want provider or provider.host, each a non-empty subject token without wildcards", f)
			}
		}
		var subj string
		switch len(tokens) {
		case 1:
			subj = strings.TrimSuffix(events.ProbeSubjects, ">") + tokens[0] + ".>"
		case 2:
			subj = events.ProbeSubject(tokens[0], tokens[1], "*")
		default:
			return nil, fmt.Errorf("probe filter %q: want provider or provider.host", f)
		}
		if !seen[subj] {
			seen[subj] = true
			out = append(out, subj)
		}
	}
	return out, nil
}

// validToken reports whether s can stand as one literal subject token.
func validToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n")
}
