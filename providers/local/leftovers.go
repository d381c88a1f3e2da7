package local

import (
	"context"
	"errors"
	"os"

	"github.com/egressd/egressd/providers"
)

// Leftovers lists (providers.LeftoverLister) the instance directories whose instance.json
// cannot be read and that no live process serves from: no instance can be made of them (Get
// stays Transient), so orphan GC may delete one through Delete(ID). The
// directories of interrupted creates and deletes (.tmp-*, .trash-*) are swept by the
// provider itself on the next allocation.
func (p *Provider) Leftovers(ctx context.Context) ([]providers.Leftover, error) {
	names, err := p.instanceNames()
	if err != nil {
		return nil, p.classify("list", "", err)
	}
	var out []providers.Leftover
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, p.classify("list", "", err)
		}
		if _, err := p.readMeta(name); !errors.Is(err, errCorrupt) {
			continue
		}
		if len(findProcesses(p.pidPath(name))) > 0 {
			continue
		}
		fi, err := os.Stat(p.dir(name))
		if err != nil {
			continue
		}
		out = append(out, providers.Leftover{ID: idOf(name), Host: hostName, Name: name, Parts: []string{p.dir(name)}, ModifiedAt: fi.ModTime()})
	}
	return out, nil
}
