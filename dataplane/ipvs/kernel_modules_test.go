package ipvs

import (
	"errors"
	"os"
	"testing"

	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/internal/vmtest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestKernelWithoutXFRM: on a kernel without xfrm_user, whose netlink
// family a handle of every family needs, the dataplane opens the kernel
// and programs a full State. TestKernelTestsInVM leaves the module out;
// a host kernel that has it skips the test.
func TestKernelWithoutXFRM(t *testing.T) {
	requireIPVS(t)
	ns := netns.New(t, "noxfrm")
	err := ns.Do(func() error {
		h, err := netlink.NewHandle()
		if err == nil {
			h.Close()
		}
		return err
	})
	if err == nil {
		msg := "the kernel has xfrm_user: this test needs one without (TestKernelTestsInVM leaves it out)"
		if os.Getenv(netns.RequireKernelEnv) == "1" && vmtest.Inside() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if !errors.Is(err, unix.EPROTONOSUPPORT) {
		t.Fatalf("a netlink handle of every family: %v, want EPROTONOSUPPORT from the xfrm family", err)
	}
	// A LoadBalancer with source ranges: every ipset type, the link, the
	// chains and virtual servers with real servers.
	all := dataplanetest.Scenarios()
	i := slicesIndex(all, "LoadBalancer")
	if i < 0 {
		t.Fatal("no scenario LoadBalancer")
	}
	_, st := all[i].Build(t)
	if err := ns.Do(func() error {
		d, err := New(Config{})
		if err != nil {
			return err
		}
		if err := d.Sync(t.Context(), st); err != nil {
			return err
		}
		if !d.LastSync().Full {
			t.Error("the first Sync was not full")
		}
		r, err := d.Read(t.Context())
		if err != nil {
			return err
		}
		if len(r.VirtualServers) == 0 {
			t.Error("nothing programmed")
		}
		return d.Cleanup(t.Context())
	}); err != nil {
		t.Fatal(err)
	}
}
