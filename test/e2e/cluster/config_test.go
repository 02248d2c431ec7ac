package cluster

import "testing"

func TestConfigDefaults(t *testing.T) {
	bin := func() Config {
		c := Config{WorkDir: "/work/x"}
		c.Bin.Etcd, c.Bin.APIServer, c.Bin.ControllerManager = "e", "a", "c"
		c.Bin.Scheduler, c.Bin.Kubelet, c.Bin.CoreDNS = "s", "k", "d"
		return c
	}
	got, err := bin().withDefaults()
	if err != nil || got.Nodes != 1 || got.Log == nil || got.WorkDir != "/work/x" {
		t.Errorf("defaults: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"too many nodes", func(c *Config) { c.Nodes = 4 }, "cluster: Nodes 4: want 1 to 3"},
		{"under /var/lib", func(c *Config) { c.WorkDir = "/var/lib/e2e" }, `cluster: WorkDir "/var/lib/e2e" lies under /var/lib, which every node mounts over`},
		{"under /var/run", func(c *Config) { c.WorkDir = "/var/run/e2e" }, `cluster: WorkDir "/var/run/e2e" lies under /run, which every node mounts over`},
		{"no kubelet", func(c *Config) { c.Bin.Kubelet = "" }, "cluster: Bin.Kubelet is required"},
		{"no work dir", func(c *Config) { c.WorkDir = "" }, "cluster: WorkDir is required"},
	} {
		c := bin()
		tc.edit(&c)
		_, err := c.withDefaults()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.want)
		}
	}
}
