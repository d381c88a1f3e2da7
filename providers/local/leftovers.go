package local

import (
	"context"
	"errors"
	"os"
	"time"
)

// Leftover is an instance directory whose instance.json cannot be read: no instance can be
// made of it (Get stays Transient), so orphan GC may delete it through Delete(ID) once no
// process serves from it and it has been left alone for a while.
type Leftover struct {
	ID         string
	Name       string
	ModifiedAt time.Time
}

// Leftovers lists the instance directories with unreadable state and no live process. The
// directories of interrupted creates and deletes (.tmp-*, .trash-*) are swept by the
// provider itself on the next allocation.
func (p *Provider) Leftovers(ctx context.Context) ([]Leftover, error) {
	names, err := p.instanceNames()
	if err != nil {
		return nil, p.classify("list", "", err)
	}
	var out []Leftover
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
		out = append(out, Leftover{ID: idOf(name), Name: name, ModifiedAt: fi.ModTime()})
	}
	return out, nil
}
