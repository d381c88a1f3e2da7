package main

import (
	"github.com/egressd/egressd/providers"
)

// backend is a built provider with what the provisioner needs from it.
type backend interface {
	providers.Provider
	providers.Cataloger
}

// leftoversOf returns the backend's leftover lister, if it has one.
func leftoversOf(b backend) providers.LeftoverLister {
	l, _ := b.(providers.LeftoverLister)
	return l
}
