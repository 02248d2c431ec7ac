package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// VM makes the cluster's worker nodes virtual machines, for what the
// machine's own kernel lacks (IPVS): each is Debian's cloud kernel under
// qemu-system-x86_64 with TCG (no KVM), booted from an initramfs holding
// containerd, runc, the CNI plugins, kubelet, the proxies and the images,
// its virtio NIC a tap device on the runner's bridge. The control plane
// stays in node 1's namespace, whose Node gets the control-plane taint
// before the VMs boot, so that no test pod lands where no proxy runs.
type VM struct {
	// Nodes is how many VMs, 1 to MaxNodes; zero means 1. VM k is node
	// NodeName(k+1) at NodeIP(k+1), its pod subnet VMPodCIDR(k).
	Nodes int
	// Kernel is the kernel image booted; zero: the newest
	// /boot/vmlinuz-*-cloud-amd64 (apt: linux-image-cloud-amd64). Its
	// modules are read from /lib/modules/<version>.
	Kernel string
	// MemoryMiB is each VM's memory; zero: 2048.
	MemoryMiB int
	// CPUs is each VM's processor count; zero: 2.
	CPUs int
}

// VM timeouts: a VM boots, imports the images and registers in minutes
// under TCG on a loaded machine.
const (
	vmReadyTimeout = 20 * time.Minute
	vmCtlPort      = 10999
	// vmCtlTimeout bounds one request to the VM's control script: a
	// proxy's --cleanup takes minutes there.
	vmCtlTimeout            = 5 * time.Minute
	vmRuntimeRequestTimeout = 10 * time.Minute
)

// vmState is what the cluster knows of its VMs' proxies.
type vmState struct {
	proxy   *Proxy   // the proxy running in every VM, nil when none
	started []string // the names of every proxy started, whose logs Down saves
}

func (v *VM) withDefaults(nodes int) (*VM, error) {
	out := *v
	if nodes != 1 {
		return nil, fmt.Errorf("cluster: Nodes %d with VM: the namespace node is the control plane's alone (set VM.Nodes)", nodes)
	}
	if out.Nodes == 0 {
		out.Nodes = 1
	}
	if out.Nodes < 1 || out.Nodes > MaxNodes {
		return nil, fmt.Errorf("cluster: VM.Nodes %d: want 1 to %d", out.Nodes, MaxNodes)
	}
	if out.MemoryMiB == 0 {
		out.MemoryMiB = 2048
	}
	if out.CPUs == 0 {
		out.CPUs = 2
	}
	if out.Kernel == "" {
		images, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64")
		if len(images) == 0 {
			return nil, errors.New("cluster: VM: no /boot/vmlinuz-*-cloud-amd64 (apt: linux-image-cloud-amd64)")
		}
		out.Kernel = images[len(images)-1]
	}
	if _, err := os.Stat(out.modules()); err != nil {
		return nil, fmt.Errorf("cluster: VM: the modules of %s: %w", out.Kernel, err)
	}
	for _, tool := range []string{"qemu-system-x86_64", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("cluster: VM: %s (apt: qemu-system-x86, busybox-static): %w", tool, err)
		}
	}
	return &out, nil
}

// modules is the kernel's module directory.
func (v *VM) modules() string {
	return filepath.Join("/lib/modules", strings.TrimPrefix(filepath.Base(v.Kernel), "vmlinuz-"))
}

// KernelRelease is the release of the kernel the VMs boot.
func (v *VM) KernelRelease() string { return filepath.Base(v.modules()) }

// vmNodes is how many VM nodes cfg has.
func (cfg Config) vmNodes() int {
	if cfg.VM == nil {
		return 0
	}
	return cfg.VM.Nodes
}

// VMPodCIDR is VM k's pod subnet (1-based), set on its Node before its
// kubelet registers, so that its CNI configuration is in its image.
func VMPodCIDR(k int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(100 + k), 0}), 24)
}

// vmNode is one VM of the cluster.
type vmNode struct {
	k       int
	name    string
	ip      netip.Addr
	podCIDR netip.Prefix
	dir     string // WorkDir/<name>
}

func (c *Cluster) vmList() []vmNode {
	var vms []vmNode
	for k := 1; k <= c.cfg.vmNodes(); k++ {
		i := c.cfg.Nodes + k
		vms = append(vms, vmNode{k: k, name: NodeName(i), ip: NodeIP(i), podCIDR: VMPodCIDR(k), dir: c.path(NodeName(i))})
	}
	return vms
}

// startVMs taints node 1 as the control plane, then boots every VM and
// waits until each is Ready.
func (c *Cluster) startVMs(ctx context.Context) error {
	if err := c.taintControlPlane(ctx); err != nil {
		return err
	}
	vms := c.vmList()
	var qemus []*process
	for _, vm := range vms {
		q, err := c.bootVM(ctx, vm, vms)
		if err != nil {
			return err
		}
		qemus = append(qemus, q)
	}
	ctx, cancel := context.WithTimeout(ctx, vmReadyTimeout)
	defer cancel()
	for k, vm := range vms {
		if err := c.waitVMReady(ctx, vm, qemus[k]); err != nil {
			return err
		}
		// qemu read the image at start.
		os.Remove(filepath.Join(vm.dir, "initrd.cpio"))
	}
	return nil
}

// taintControlPlane keeps test pods off node 1, which runs no proxy in a
// cluster of VMs: the control-plane taint is one the e2e framework counts
// as not blocking, so it neither waits for the node nor schedules there.
func (c *Cluster) taintControlPlane(ctx context.Context) error {
	name := NodeName(1)
	// kubelet updates its Node too: retry on its newer versions.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
		_, err = c.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: taint %s: %w", name, err)
	}
	return nil
}

// bootVM registers vm's Node with its pod subnet, routes that subnet
// through it, writes its image and starts qemu on a tap device of br0.
func (c *Cluster) bootVM(ctx context.Context, vm vmNode, all []vmNode) (*process, error) {
	_, err := c.client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: vm.name},
		Spec:       corev1.NodeSpec{PodCIDR: vm.podCIDR.String(), PodCIDRs: []string{vm.podCIDR.String()}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("cluster: %s: %w", vm.name, err)
	}
	route := []string{"ip", "route", "replace", vm.podCIDR.String(), "via", vm.ip.String()}
	if err := c.inNS(ctx, "runner", c.runner, route...); err != nil {
		return nil, err
	}
	for _, n := range c.nodes {
		if err := c.inNS(ctx, n.name, n.holder, route...); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(vm.dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	start := time.Now()
	initrd := filepath.Join(vm.dir, "initrd.cpio")
	if err := c.writeVMImage(vm, all, initrd); err != nil {
		return nil, err
	}
	c.logf("%s: image written in %s", vm.name, time.Since(start).Round(time.Second))
	tap := fmt.Sprintf("tap-vm%d", vm.k)
	for _, argv := range [][]string{
		{"ip", "tuntap", "add", tap, "mode", "tap"},
		{"ip", "link", "set", tap, "master", "br0", "up"},
	} {
		if err := c.inNS(ctx, "runner", c.runner, argv...); err != nil {
			return nil, err
		}
	}
	v := c.cfg.VM
	ip4 := vm.ip.As4()
	// qemu runs in the runner's namespaces, where its tap device is.
	return c.startOn(&node{name: vm.name, holder: c.runner}, "qemu",
		"qemu-system-x86_64", "-machine", "q35,accel=tcg", "-cpu", "max",
		"-smp", strconv.Itoa(v.CPUs), "-m", strconv.Itoa(v.MemoryMiB),
		"-kernel", v.Kernel, "-initrd", initrd,
		"-append", "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init",
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no",
		"-device", fmt.Sprintf("virtio-net-pci,netdev=n0,mac=52:54:00:%02x:%02x:%02x", ip4[1], ip4[2], ip4[3]),
		"-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot")
}

// waitVMReady waits until vm's Node is Ready.
func (c *Cluster) waitVMReady(ctx context.Context, vm vmNode, qemu *process) error {
	for {
		n, err := c.client.CoreV1().Nodes().Get(ctx, vm.name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					c.logf("%s: VM Ready", vm.name)
					return nil
				}
			}
		}
		if qemu.exited() {
			return qemu.failure("%s: the VM stopped before its node was Ready", vm.name)
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			c.saveVMLogs(context.WithoutCancel(ctx))
			return qemu.failure("%s: not Ready: %v (its kubelet's log: %s)", vm.name, err, filepath.Join(vm.dir, "kubelet.log"))
		}
	}
}

// vmCtl asks vm's control script (a CGI of busybox httpd in the VM) to
// act on the program name: start, alive, stop, or exec argv.
func (c *Cluster) vmCtl(ctx context.Context, vm vmNode, action, name string, argv []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, vmCtlTimeout)
	defer cancel()
	u := fmt.Sprintf("http://%s/cgi-bin/ctl?%s+%s", netip.AddrPortFrom(vm.ip, vmCtlPort), url.QueryEscape(action), url.QueryEscape(name))
	body := strings.Join(argv, "\n")
	if body != "" {
		body += "\n"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: c.dial.DialContext, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("cluster: %s: %s %s: %w", vm.name, action, name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	if err != nil {
		return string(b), fmt.Errorf("cluster: %s: %s %s: %w", vm.name, action, name, err)
	}
	return string(b), nil
}

// startVMProxy runs p in every VM and waits until each /healthz answers.
func (c *Cluster) startVMProxy(ctx context.Context, p Proxy) error {
	if c.vm.proxy != nil {
		return fmt.Errorf("cluster: StartProxy %s: %s is running", p.Name, c.vm.proxy.Name)
	}
	c.vm.proxy = &p
	if !slices.Contains(c.vm.started, p.Name) {
		c.vm.started = append(c.vm.started, p.Name)
	}
	for _, vm := range c.vmList() {
		argv := append([]string{p.Binary}, c.proxyArgs(&node{name: vm.name}, p)...)
		if _, err := c.vmCtl(ctx, vm, "start", p.Name, argv); err != nil {
			return err
		}
	}
	for _, vm := range c.vmList() {
		if err := c.waitVMProxy(ctx, vm, p); err != nil {
			return err
		}
	}
	c.logf("%s (mode %q) healthy in %d VM(s)", p.Name, p.Mode, c.cfg.vmNodes())
	return nil
}

func (c *Cluster) waitVMProxy(ctx context.Context, vm vmNode, p Proxy) error {
	ctx, cancel := context.WithTimeout(ctx, 2*proxyHealthTimeout)
	defer cancel()
	u := fmt.Sprintf("http://%s:%d/healthz", vm.ip, ProxyHealthzPort)
	last := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if resp, err := c.HTTPClient().Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if alive, err := c.vmCtl(ctx, vm, "alive", p.Name, nil); err == nil && strings.TrimSpace(alive) != "yes" {
			return c.vmFailure(vm, p.Name, "exited before %s answered 200", u)
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return c.vmFailure(vm, p.Name, "%s: %v (last: %s)", u, err, last)
		}
	}
}

// vmFailure is an error about program name in vm carrying its log's tail.
func (c *Cluster) vmFailure(vm vmNode, name, format string, args ...any) error {
	c.saveVMLogs(context.Background())
	log := filepath.Join(vm.dir, name+".log")
	return fmt.Errorf("cluster: %s %s: %s; %s ends:\n%s", vm.name, name, fmt.Sprintf(format, args...), log, tail(log, 25))
}

// stopVMProxy stops the VMs' proxy and runs its --cleanup in each.
func (c *Cluster) stopVMProxy(ctx context.Context) error {
	p := c.vm.proxy
	if p == nil {
		return nil
	}
	c.vm.proxy = nil
	var errs []error
	for _, vm := range c.vmList() {
		if _, err := c.vmCtl(ctx, vm, "stop", p.Name, nil); err != nil {
			errs = append(errs, err)
		}
		argv := []string{p.Binary, "--cleanup"}
		if p.Mode != "" {
			argv = append(argv, "--proxy-mode="+p.Mode)
		}
		out, err := c.vmCtl(ctx, vm, "exec", p.Name+"-cleanup", argv)
		if err == nil && !strings.HasSuffix(strings.TrimSpace(out), "exit: 0") {
			err = fmt.Errorf("cluster: %s: %s --cleanup: %s", vm.name, p.Name, strings.TrimSpace(out))
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	c.logf("%s stopped and cleaned up in %d VM(s)", p.Name, c.cfg.vmNodes())
	return errors.Join(errs...)
}

// saveVMLogs copies every VM's logs into WorkDir/<node>/, as far as the
// VMs answer.
func (c *Cluster) saveVMLogs(ctx context.Context) {
	client := &http.Client{Transport: &http.Transport{DialContext: c.dial.DialContext, DisableKeepAlives: true}, Timeout: 20 * time.Second}
	for _, vm := range c.vmList() {
		names := append([]string{"containerd", "kubelet", "images"}, c.vm.started...)
		for _, name := range names {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/log/%s.log", netip.AddrPortFrom(vm.ip, vmCtlPort), name), nil)
			if err != nil {
				continue
			}
			resp, err := client.Do(req)
			if err != nil {
				break // the VM does not answer
			}
			if resp.StatusCode == http.StatusOK {
				if f, err := os.Create(filepath.Join(vm.dir, name+".log")); err == nil {
					io.Copy(f, resp.Body)
					f.Close()
				}
			}
			resp.Body.Close()
		}
	}
}

// VMKernelRelease is the release of the kernel the cluster's VMs boot,
// empty without VMs.
func (c *Cluster) VMKernelRelease() string {
	if c.cfg.VM == nil {
		return ""
	}
	return c.cfg.VM.KernelRelease()
}
