package netns

import (
	"strings"
	"testing"
)

func TestVethPing(t *testing.T) {
	Require(t, "ping")
	a := New(t, "a")
	b := New(t, "b")
	Veth(t, a, "va", []string{"10.200.0.1/24", "fd00:200::1/64"}, b, "vb", []string{"10.200.0.2/24", "fd00:200::2/64"})
	a.MustRun("ping", "-c", "1", "-W", "2", "10.200.0.2")
	a.MustRun("ping", "-6", "-c", "1", "-W", "2", "fd00:200::2")
	out := b.MustRun("ip", "-o", "addr", "show", "dev", "vb")
	if !strings.Contains(out, "10.200.0.2/24") {
		t.Errorf("vb addresses = %q, want 10.200.0.2/24", out)
	}
	if err := a.Do(func() error {
		_, err := a.Run("true")
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
