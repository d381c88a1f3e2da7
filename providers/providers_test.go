package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"
	"testing"
)

func TestClassOf(t *testing.T) {
	backend := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrPermission}
	cases := []struct {
		err  error
		want error
	}{
		{nil, nil},
		{Wrap(ErrNotFound, "get", "p", "id", backend), ErrNotFound},
		{Wrap(ErrQuota, "create", "p", "", backend), ErrQuota},
		{Wrap(ErrPermanent, "get", "p", "id", backend), ErrPermanent},
		{Wrap(ErrTransient, "get", "p", "id", backend), ErrTransient},
		{errors.New("unclassified"), ErrTransient},
		{context.Canceled, ErrTransient},
		{fmt.Errorf("outer: %w", Errorf(ErrQuota, "create", "p", "", "pool full")), ErrQuota},
	}
	for _, c := range cases {
		if got := ClassOf(c.err); got != c.want {
			t.Errorf("ClassOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	err := Wrap(ErrPermanent, "get", "kvm", "hosts/a/domains/b", backend)
	var pe *fs.PathError
	if !errors.As(err, &pe) || !errors.Is(err, fs.ErrPermission) {
		t.Fatal("the backend error is not reachable through the classified error")
	}
	if msg := err.Error(); msg != "kvm get hosts/a/domains/b: permanent error: open /x: permission denied" {
		t.Fatalf("message %q", msg)
	}
	if Wrap(ErrQuota, "create", "p", "", nil) != nil {
		t.Fatal("wrapping nil must stay nil")
	}
}

func TestInstanceName(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	a := InstanceName("inst-1", "uid-1")
	if a != InstanceName("inst-1", "uid-1") {
		t.Fatal("not deterministic")
	}
	if !label.MatchString(a) || len(a) != len("egress-")+16 {
		t.Fatalf("%q is not a 23-character DNS label", a)
	}
	for _, other := range []string{InstanceName("inst-2", "uid-1"), InstanceName("inst-1", "uid-2"), InstanceName("inst-1/uid", "-1")} {
		if other == a {
			t.Fatalf("collision: %q", other)
		}
	}
}

// Secrets and user-data never print, whatever the formatting path.
func TestRedaction(t *testing.T) {
	const sentinel = "SENTINEL-7c1e"
	req := CreateRequest{Name: "n", UserData: UserData("#cloud-config\n# " + sentinel), Auth: &Auth{Username: "u", Password: Secret(sentinel)}}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("create", "req", req, "password", req.Auth.Password, "userData", req.UserData)
	b, _ := json.Marshal(req)
	outs := []string{
		fmt.Sprintf("%v", req), fmt.Sprintf("%+v", req), fmt.Sprintf("%#v", req), fmt.Sprintf("%s", req.UserData),
		fmt.Sprintf("%v %s %q", *req.Auth, req.Auth.Password, req.Auth.Password), string(b), buf.String(),
	}
	for i, out := range outs {
		if strings.Contains(out, sentinel) {
			t.Errorf("output %d leaks the secret: %s", i, out)
		}
	}
	if req.Auth.Password.Reveal() != sentinel || string(req.UserData) != "#cloud-config\n# "+sentinel {
		t.Fatal("the values themselves must stay usable")
	}
	if !strings.Contains(req.UserData.String(), fmt.Sprint(len(req.UserData))) {
		t.Fatal("user-data should print its size")
	}
}

func TestWrapKeepsAnInnerClass(t *testing.T) {
	inner := Wrap(ErrQuota, "create", "p", "id", errors.New("pool full"))
	outer := Wrap(ErrTransient, "create", "p", "id", fmt.Errorf("retrying: %w", inner))
	if ClassOf(outer) != ErrQuota {
		t.Fatalf("outer class %v, want the inner Quota", ClassOf(outer))
	}
}

func TestPickKey(t *testing.T) {
	one := map[string]int{"small": 1}
	two := map[string]int{"small": 1, "big": 2}
	for _, c := range []struct {
		key  string
		m    map[string]int
		want string
		ok   bool
	}{
		{"", one, "small", true}, {"small", one, "small", true}, {"big", one, "big", false},
		{"", two, "", false}, {"big", two, "big", true}, {"", nil, "", false},
	} {
		if got, ok := PickKey(c.key, c.m); got != c.want || ok != c.ok {
			t.Errorf("PickKey(%q, %v) = %q, %v, want %q, %v", c.key, c.m, got, ok, c.want, c.ok)
		}
	}
}

func TestValidNameAndKey(t *testing.T) {
	for s, want := range map[string]bool{"egress-abc": true, "a": true, "pv1-1": true, "": false, "-a": false, "a-": false,
		"A": false, "a_b": false, "a/b": false, strings.Repeat("a", 63): true, strings.Repeat("a", 64): false} {
		if ValidName(s) != want {
			t.Errorf("ValidName(%q) = %v", s, !want)
		}
	}
	for s, want := range map[string]bool{"debian-13": true, "Small_1.x": true, "a..b": false, ".a": false, "a.": false,
		"a b": false, "": false, strings.Repeat("k", 64): false} {
		if ValidKey(s) != want {
			t.Errorf("ValidKey(%q) = %v", s, !want)
		}
	}
}
