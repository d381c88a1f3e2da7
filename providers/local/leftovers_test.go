package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/egressd/egressd/providers"
)

// A directory with unreadable state is a leftover; deleting it through Delete lets its proxy
// be created again (Get turns from Transient to NotFound).
func TestLeftovers(t *testing.T) {
	p := newProvider(t, testConfig(t, 2))
	ctx := context.Background()
	name := providers.InstanceName("inst", "uid-corrupt")
	if err := os.MkdirAll(filepath.Join(p.stateDir, name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.stateDir, name, metaFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := p.Leftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != name || list[0].ModifiedAt.IsZero() {
		t.Fatalf("leftovers %+v", list)
	}
	if _, err := p.Get(ctx, list[0].ID); providers.ClassOf(err) != providers.ErrTransient {
		t.Fatalf("Get of a corrupt instance: %v", err)
	}
	if err := p.Delete(ctx, list[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, list[0].ID); providers.ClassOf(err) != providers.ErrNotFound {
		t.Fatalf("Get after deleting the leftover: %v", err)
	}
	if list, _ := p.Leftovers(ctx); len(list) != 0 {
		t.Fatalf("leftovers after delete: %+v", list)
	}
}
