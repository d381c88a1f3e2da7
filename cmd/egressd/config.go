package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/egressd/egressd/providers/libvirt"
	"github.com/egressd/egressd/schemas"
	"go.yaml.in/yaml/v3"
)

// fileConfig is egressd's YAML config. Decoding is strict: an unknown key is an error that
// names it and its line.
type fileConfig struct {
	Version   int              `yaml:"version"`
	Providers []providerConfig `yaml:"providers"`
	Events    *eventsConfig    `yaml:"events"`
	LeaseHTTP *leaseHTTPConfig `yaml:"leaseHTTP"`
	Leases    *leasesConfig    `yaml:"leases"`
}

// providerConfig declares one provider instance: a name users put in specs, a type, and the
// block of that type.
type providerConfig struct {
	Name    string          `yaml:"name"`
	Type    string          `yaml:"type"`
	Local   *localConfig    `yaml:"local"`
	Libvirt *libvirt.Config `yaml:"libvirt"`
}

// localConfig is the `local:` block (providers/local.Config).
type localConfig struct {
	StateDir         string   `yaml:"stateDir"`
	Addresses        []string `yaml:"addresses"`
	BindSource       *bool    `yaml:"bindSource"`
	MaxConcurrentOps int      `yaml:"maxConcurrentOps"`
}

// defaultConfig is what runs with no config file: one local provider named "local".
func defaultConfig() fileConfig {
	return fileConfig{Version: 1, Providers: []providerConfig{{Name: "local", Type: "local", Local: &localConfig{}}}}
}

// loadConfig reads path, or returns the default when path is empty.
func loadConfig(path string) (fileConfig, error) {
	if path == "" {
		return defaultConfig(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fileConfig{}, fmt.Errorf("config: %w", err)
	}
	cfg, err := parseConfig(b)
	if err != nil {
		return fileConfig{}, fmt.Errorf("config %s: %w", filepath.Base(path), err)
	}
	return cfg, nil
}

func parseConfig(b []byte) (fileConfig, error) {
	var cfg fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return fileConfig{}, errors.New("empty config")
		}
		return fileConfig{}, err
	}
	if cfg.Version == 0 {
		cfg.Version = 1
	}
	return cfg, cfg.validate()
}

// providerTypes lists the provider types this binary has; the registry in providers.go
// builds them.
var providerTypes = []string{"local", "libvirt"}

func (c fileConfig) validate() error {
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
		if p.Type != "local" && p.Local != nil || p.Type != "libvirt" && p.Libvirt != nil {
			errs = append(errs, fmt.Errorf("%s: a block of another type is set (type is %q)", at, p.Type))
		}
		switch p.Type {
		case "local":
			if p.Local == nil {
				c.Providers[i].Local = &localConfig{}
			}
		case "libvirt":
			if p.Libvirt == nil {
				errs = append(errs, fmt.Errorf("%s.libvirt: is required for type libvirt", at))
			}
		case "":
			errs = append(errs, fmt.Errorf("%s.type: is required (one of %v)", at, providerTypes))
		default:
			errs = append(errs, fmt.Errorf("%s.type: unknown provider type %q (one of %v)", at, p.Type, providerTypes))
		}
	}
	if err := c.eventLimits().Validate(); err != nil {
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
	return errors.Join(errs...)
}
