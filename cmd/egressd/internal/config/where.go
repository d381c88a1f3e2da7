package config

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/egressd/egressd/providers"
	"go.yaml.in/yaml/v3"
)

// withPlace adds the key path and line of a value the decoder refused to an error that says
// neither. yaml.v3 passes a field's own UnmarshalText error on bare (a *providers.DurationError
// carries only the text), so the document is read again as nodes and the first scalar
// mapping value equal to that text names its place: "line 9: providers[0].gcp.budgets.call:
// "5x" is not a duration like 30s or 20m".
func withPlace(src []byte, err error) error {
	var de *providers.DurationError
	if !errors.As(err, &de) {
		return err
	}
	var root yaml.Node
	if yaml.NewDecoder(bytes.NewReader(src)).Decode(&root) != nil {
		return err
	}
	if path, line, ok := findScalar(&root, "", de.Text); ok {
		return fmt.Errorf("line %d: %s: %w", line, path, err)
	}
	return err
}

// findScalar walks n depth first for a scalar mapping value or sequence item equal to text,
// and returns its path as the config's errors spell keys (a.b[2].c).
func findScalar(n *yaml.Node, path, text string) (string, int, bool) {
	if n.Kind == yaml.ScalarNode {
		return path, n.Line, path != "" && n.Value == text
	}
	for i, c := range n.Content {
		p := path
		switch n.Kind {
		case yaml.MappingNode:
			if i%2 == 0 {
				continue // a key; its value follows
			}
			p = n.Content[i-1].Value
			if path != "" {
				p = path + "." + p
			}
		case yaml.SequenceNode:
			p = path + "[" + strconv.Itoa(i) + "]"
		}
		if p, l, ok := findScalar(c, p, text); ok {
			return p, l, true
		}
	}
	return "", 0, false
}
