package prober

import (
	"slices"
	"strings"
	"testing"
)

func TestSubjects(t *testing.T) {
	for _, tc := range []struct {
		filters []string
		want    []string
		err     bool
	}{
		{nil, []string{"egress.probe.>"}, false},
		{[]string{"kvm-home"}, []string{"egress.probe.kvm-home.>"}, false},
		{[]string{"kvm-home.h1", "gcp"}, []string{"egress.probe.kvm-home.h1.*", "egress.probe.gcp.>"}, false},
		{[]string{"a", "a"}, []string{"egress.probe.a.>"}, false},
		{[]string{""}, nil, true},
		{[]string{"a.b.c"}, nil, true},
		{[]string{"a.*"}, nil, true},
		{[]string{">"}, nil, true},
		{[]string{"a..b"}, nil, true},
		{[]string{"a b"}, nil, true},
	} {
		got, err := subjects(tc.filters)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q %v", tc.filters, got, err)
		}
	}
}

func TestNewChecksConfig(t *testing.T) {
	store := newEnv(t).store // New does no I/O, but it wants every handle there
	nc := store.JS.Conn()
	good := Config{Buckets: BucketsOf(store), NC: nc, Worker: "w", DefaultCheckURL: "http://127.0.0.1:8089/"}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		err  string
	}{
		{"good", func(*Config) {}, ""},
		{"no buckets", func(c *Config) { c.Buckets = Buckets{} }, "required"},
		{"a bucket missing", func(c *Config) { c.Buckets.Probers = nil }, "required"},
		{"no connection", func(c *Config) { c.NC = nil }, "required"},
		{"no worker", func(c *Config) { c.Worker = "" }, "required"},
		{"no check URL", func(c *Config) { c.DefaultCheckURL = "" }, "default check URL"},
		{"relative check URL", func(c *Config) { c.DefaultCheckURL = "/echo" }, "default check URL"},
		{"ftp check URL", func(c *Config) { c.DefaultCheckURL = "ftp://x/" }, "default check URL"},
		{"bad filter", func(c *Config) { c.Filters = []string{"a.b.c"} }, "filter"},
	} {
		cfg := good
		tc.edit(&cfg)
		p, err := New(cfg)
		if tc.err == "" {
			if err != nil || p.cfg.Concurrency != DefaultConcurrency || p.cfg.Now == nil || p.cfg.Log == nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.err)
		}
	}
	// A password in a bad URL is not quoted back.
	if _, err := New(Config{Buckets: BucketsOf(store), NC: nc, Worker: "w", DefaultCheckURL: "ftp://u:hunter2@x/"}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error quotes the URL: %v", err)
	}
}
