// Package config is egressd's YAML config (egressd run --config, egressd setup, egressd
// validate) and the one registry of provider types (registry.go): loading, strict decoding,
// validation naming each field, and building the providers a config declares. Only
// cmd/egressd imports it; it is the one place concrete providers are chosen.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/egressd/egressd/providers/local"
	"github.com/egressd/egressd/schemas"
	"go.yaml.in/yaml/v3"
)

// File is egressd's YAML config. Decoding is strict: an unknown key is an error that
// names it and its line.
type File struct {
	Version int `yaml:"version"`
	// Providers is decoded through providerDoc (registry.go), not by tag.
	Providers []Provider    `yaml:"-"`
	Events    *eventsConfig `yaml:"events"`
	LeaseHTTP *LeaseHTTP    `yaml:"leaseHTTP"`
	Leases    *leasesConfig `yaml:"leases"`
	Limits    *fleetLimits  `yaml:"limits"`
	Health    *healthConfig `yaml:"health"`
}

// Provider declares one provider instance: a name users put in specs, a type, and the
// block of that type (a pointer to the type's config, as the registry declares it).
type Provider struct {
	Name string
	Type string
	// MaxCreatesPerMinute bounds the creates the reconciler sends this provider (0: no bound),
	// with CreateBurst of them at once (default 1); docs/configuration.md.
	MaxCreatesPerMinute, CreateBurst int
	// MaxInstances and MaxInstancesPerTarget bound the instances egressd may have on this
	// provider, and on each of its targets (0: no bound).
	MaxInstances, MaxInstancesPerTarget int
	// MaxLifetimeSeconds is the lifetime of the provider's instances whose spec sets none
	// (0: none); it rides to the provisioners in the catalog record's limits.
	MaxLifetimeSeconds int
	// MaxUnavailable is the provider's rollout budget (0: the default, 1): how many of its
	// proxies of their own may be draining or replaced at once for a change that needs new
	// instances (docs/rollouts.md).
	MaxUnavailable int
	Block          any
	// Others names blocks of other types found in the entry: an error for validate.
	Others []string
}

// Default is what runs with no config file: one local provider named "local".
func Default() File {
	return File{Version: 1, Providers: []Provider{{Name: "local", Type: "local", Block: &local.Config{}}}}
}

// Load reads path, or returns the default when path is empty.
func Load(path string) (File, error) {
	if path == "" {
		return Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(b)
	if err != nil {
		return File{}, fmt.Errorf("config %s: %w", filepath.Base(path), err)
	}
	return cfg, nil
}

// fileDoc is the YAML shape of the whole file: File with its providers as providerDoc.
var fileDoc = reflect.StructOf([]reflect.StructField{
	{Name: "Config", Type: reflect.TypeFor[File](), Tag: `yaml:",inline"`},
	{Name: "Providers", Type: reflect.SliceOf(providerDoc), Tag: `yaml:"providers"`},
})

// docTypeNames renames the reflect-built shapes in yaml's messages ("field lokal not found in
// type ..."): yaml.v3 spells an anonymous struct out, every field and tag of every registered
// type, in one line; the messages name them as the types they stand for. fileDoc first: its
// spelling holds providerDoc's.
// The names are those the messages had before this package left package main, kept because
// docs/configuration.md quotes them to users.
var docTypeNames = strings.NewReplacer(fileDoc.String(), "main.fileConfig", providerDoc.String(), "main.providerConfig")

func Parse(b []byte) (File, error) {
	doc := reflect.New(fileDoc)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(doc.Interface()); err != nil {
		if errors.Is(err, io.EOF) {
			return File{}, errors.New("empty config")
		}
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for i, msg := range te.Errors {
				te.Errors[i] = docTypeNames.Replace(msg)
			}
		}
		return File{}, withPlace(b, err)
	}
	cfg := doc.Elem().Field(0).Interface().(File)
	docs := doc.Elem().Field(1)
	for i := range docs.Len() {
		cfg.Providers = append(cfg.Providers, providerFromDoc(docs.Index(i)))
	}
	if docs.IsNil() {
		// No providers key (a config holding only leaseHTTP, say): the default's one local
		// provider, as with no config at all. An empty list stays an error.
		cfg.Providers = Default().Providers
	}
	if cfg.Version == 0 {
		cfg.Version = 1
	}
	return cfg, cfg.validate()
}

func (c File) validate() error {
	var errs []error
	if c.Version != 1 {
		errs = append(errs, fmt.Errorf("version: unsupported version %d (this egressd understands 1)", c.Version))
	}
	if len(c.Providers) == 0 {
		errs = append(errs, errors.New("providers: at least one provider is required"))
	}
	seen := map[string]bool{}
	for i, p := range c.Providers {
		at := fmt.Sprintf("providers[%d]", i)
		if err := schemas.ValidName(p.Name); err != nil {
			errs = append(errs, fmt.Errorf("%s.name: %w", at, err))
		} else if seen[p.Name] {
			errs = append(errs, fmt.Errorf("%s.name: duplicate provider name %q", at, p.Name))
		}
		seen[p.Name] = true
		errs = append(errs, c.Providers[i].validateKind(at)...)
	}
	if err := c.EventLimits().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateLeaseHistory(); err != nil {
		errs = append(errs, err)
	}
	if err := c.LeaseHTTP.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateLeases(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateFleet(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
