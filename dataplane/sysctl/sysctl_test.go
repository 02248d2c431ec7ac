package sysctl

import (
	"os"
	"path/filepath"
	"testing"
)

func TestProc(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net/ipv4/conf/all"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := Proc{Root: root}
	if err := p.Set("net/ipv4/conf/all/route_localnet", "1"); err != nil {
		t.Fatal(err)
	}
	if v, err := p.Get("net/ipv4/conf/all/route_localnet"); err != nil || v != "1" {
		t.Errorf("Get = %q, %v; want 1", v, err)
	}
	if _, err := p.Get("net/ipv4/vs/conntrack"); !IsNotExist(err) {
		t.Errorf("Get of a missing setting = %v, want ErrNotExist", err)
	}
	for _, bad := range []string{"", "../etc/passwd", "/etc/passwd", "net/../../x"} {
		if _, err := p.Get(bad); err == nil {
			t.Errorf("Get(%q) succeeded", bad)
		}
		if err := p.Set(bad, "1"); err == nil {
			t.Errorf("Set(%q) succeeded", bad)
		}
	}
}

func TestFakeZeroValue(t *testing.T) {
	var f Fake
	if _, err := f.Get("a"); !IsNotExist(err) {
		t.Errorf("Get on zero Fake = %v", err)
	}
	if err := f.Set("a", "2"); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Get("a"); v != "2" {
		t.Errorf("Get = %q", v)
	}
}
