package config

import (
	"github.com/egressd/egressd/providers"
)

// Backend is a built provider with what the provisioner needs from it.
type Backend interface {
	providers.Provider
	providers.Cataloger
}

// LeftoversOf returns the Backend's leftover lister, if it has one.
func LeftoversOf(b Backend) providers.LeftoverLister {
	l, _ := b.(providers.LeftoverLister)
	return l
}
