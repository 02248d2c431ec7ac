package cluster

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// vmImage is the file tree of a node VM's initramfs: paths in the VM
// mapped to where their content comes from. Parents are implied.
type vmImage map[string]vmEntry

// vmEntry is one file of a vmImage: a host file's content, bytes, a
// symbolic link or a directory.
type vmEntry struct {
	host   string
	data   []byte
	link   string
	mode   fs.FileMode // permission bits; zero: the host file's, or 0644/0755
	isDir  bool
	isData bool
}

func (im vmImage) file(vm, host string) { im[vm] = vmEntry{host: host} }
func (im vmImage) bytes(vm string, b []byte, mode fs.FileMode) {
	im[vm] = vmEntry{data: b, isData: true, mode: mode}
}
func (im vmImage) symlink(vm, target string) { im[vm] = vmEntry{link: target} }
func (im vmImage) dir(vm string)             { im[vm] = vmEntry{isDir: true} }

// program adds the host's program (found on PATH unless absolute) at
// its host path, and the shared libraries it loads.
func (im vmImage) program(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("cluster: VM: %s is not on PATH: %w", name, err)
	}
	if p, err = filepath.Abs(p); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("cluster: VM: %w", err)
	}
	im.file(p, real)
	return p, im.libraries(real)
}

var lddLine = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x`)

// libraries adds the shared libraries (and the loader) ldd names for file.
func (im vmImage) libraries(file string) error {
	out, err := exec.Command("ldd", file).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") || strings.Contains(string(out), "statically linked") {
			return nil
		}
		return fmt.Errorf("cluster: VM: ldd %s: %w: %s", file, err, out)
	}
	for _, m := range lddLine.FindAllStringSubmatch(string(out), -1) {
		im.file(m[1], m[1])
	}
	return nil
}

// tree adds every regular file under the host directory dir at the same
// path.
func (im vmImage) tree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			im.file(p, p)
		}
		return nil
	})
}

// writeCPIO writes im as an uncompressed newc archive (what the kernel
// unpacks as an initramfs; uncompressed because decompressing under TCG
// costs more than loading), parents before children.
func (im vmImage) writeCPIO(w io.Writer) error {
	all := map[string]vmEntry{}
	for p, e := range im {
		all[p] = e
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := im[d]; !ok {
				all[d] = vmEntry{isDir: true}
			}
		}
	}
	names := make([]string, 0, len(all))
	for p := range all {
		names = append(names, p)
	}
	slices.Sort(names)
	bw := bufio.NewWriterSize(w, 1<<20)
	for ino, name := range names {
		if err := writeCPIOEntry(bw, ino+1, name, all[name]); err != nil {
			return err
		}
	}
	if err := cpioHeader(bw, 0, 0, 0, "TRAILER!!!"); err != nil {
		return err
	}
	return bw.Flush()
}

const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
)

func writeCPIOEntry(w *bufio.Writer, ino int, name string, e vmEntry) error {
	rel := strings.TrimPrefix(name, "/")
	switch {
	case e.isDir:
		return cpioHeader(w, ino, cpioDir|0o755, 0, rel)
	case e.link != "":
		if err := cpioHeader(w, ino, cpioSymlink|0o777, len(e.link), rel); err != nil {
			return err
		}
		_, err := w.WriteString(e.link)
		pad(w, len(e.link))
		return err
	case e.isData:
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		if err := cpioHeader(w, ino, cpioFile|uint32(mode.Perm()), len(e.data), rel); err != nil {
			return err
		}
		_, err := w.Write(e.data)
		pad(w, len(e.data))
		return err
	}
	f, err := os.Open(e.host)
	if err != nil {
		return fmt.Errorf("cluster: VM image: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cluster: VM image: %w", err)
	}
	mode := e.mode
	if mode == 0 {
		mode = st.Mode().Perm()
	}
	if err := cpioHeader(w, ino, cpioFile|uint32(mode), int(st.Size()), rel); err != nil {
		return err
	}
	n, err := io.Copy(w, f)
	if err != nil {
		return fmt.Errorf("cluster: VM image: %s: %w", e.host, err)
	}
	if n != st.Size() {
		return fmt.Errorf("cluster: VM image: %s changed size while copied", e.host)
	}
	pad(w, int(n))
	return nil
}

// cpioHeader writes a newc header and the name, padded to four bytes.
func cpioHeader(w *bufio.Writer, ino int, mode uint32, size int, name string) error {
	_, err := fmt.Fprintf(w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	if err != nil {
		return err
	}
	w.WriteString(name)
	w.WriteByte(0)
	pad(w, 110+len(name)+1)
	return nil
}

func pad(w *bufio.Writer, n int) {
	for ; n%4 != 0; n++ {
		w.WriteByte(0)
	}
}

// writeVMImage writes vm's initramfs: busybox, the node's programs with
// their libraries, the kernel's modules, the images, the files the
// programs read (at their WorkDir paths, so that command lines are the
// host's), and the init and control scripts.
func (c *Cluster) writeVMImage(vm vmNode, all []vmNode, dst string) error {
	im := vmImage{}
	if err := im.nodeTools(); err != nil {
		return err
	}
	for _, p := range []string{c.cfg.Bin.Kubelet, c.cfg.Bin.Agent, c.cfg.Bin.KubeProxy} {
		if p != "" {
			im.file(p, p)
		}
	}
	for _, img := range c.cfg.Images {
		im.file(img, img)
	}
	if err := im.tree(c.cfg.VM.modules()); err != nil {
		return fmt.Errorf("cluster: VM: modules: %w", err)
	}
	for _, etc := range []string{"/etc/protocols", "/etc/services", "/etc/ethertypes"} {
		if _, err := os.Stat(etc); err == nil {
			im.file(etc, etc)
		}
	}
	im.bytes("/etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"), 0o644)
	im.bytes("/etc/group", []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644)
	im.bytes("/etc/hosts", []byte("127.0.0.1 localhost\n"), 0o644)
	im.bytes("/etc/resolv.conf", resolvConf(), 0o644)
	for _, d := range []string{"/proc", "/sys", "/dev", "/run", "/tmp", "/var/lib", "/var/log", "/root", "/srv"} {
		im.dir(d)
	}
	im.symlink("/srv/log", "/var/log")
	im.bytes("/srv/cgi-bin/ctl", []byte(vmCtlScript), 0o755)

	kc := kubeletConfig(c.cfg.Nodes+vm.k, "/")
	// A container starts in minutes, not seconds, in a VM starved of CPU:
	// kubelet's 2-minute default turns that into RunContainerError.
	kc.RuntimeRequestTimeout = metav1.Duration{Duration: vmRuntimeRequestTimeout}
	kubeletYAML, err := yaml.Marshal(kc)
	if err != nil {
		return fmt.Errorf("cluster: %s: kubelet config: %w", vm.name, err)
	}
	const pivot = "SystemdCgroup = false\n"
	ctrd := string(containerdConfig())
	if !strings.Contains(ctrd, pivot) {
		return fmt.Errorf("cluster: %s: containerd's configuration has no %q to add NoPivotRoot after", vm.name, strings.TrimSpace(pivot))
	}
	// runc cannot pivot_root out of an initramfs.
	ctrd = strings.Replace(ctrd, pivot, pivot+"        NoPivotRoot = true\n", 1)
	cni, err := cniConfigJSON(vm.podCIDR)
	if err != nil {
		return err
	}
	files := map[string][]byte{"kubelet.yaml": kubeletYAML, "containerd.toml": []byte(ctrd), "cni.conflist": cni}
	for name, b := range files {
		p := filepath.Join(vm.dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		im.file(p, p)
	}
	nodeKubeconfig := c.path(vm.name + ".kubeconfig")
	for _, p := range []string{nodeKubeconfig, c.path("kube-proxy.kubeconfig")} {
		im.file(p, p)
	}
	im.bytes("/init", []byte(c.vmInit(vm, all, nodeKubeconfig)), 0o755)

	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := im.writeCPIO(f); err != nil {
		f.Close()
		return fmt.Errorf("cluster: %s: image: %w", vm.name, err)
	}
	return f.Close()
}

// nodeTools adds busybox with its applets and the programs a node runs
// besides kubelet and the proxies, with their libraries: containerd, runc,
// the CNI plugins, ip, ipset, conntrack and iptables (nf_tables backend,
// with its extensions).
func (im vmImage) nodeTools() error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("cluster: VM: busybox: %w", err)
	}
	im.file("/bin/busybox", bb)
	if err := im.libraries(bb); err != nil {
		return err
	}
	applets, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("cluster: VM: busybox --list: %w", err)
	}
	for _, a := range strings.Fields(string(applets)) {
		if a != "busybox" {
			im.symlink("/bin/"+a, "busybox")
		}
	}
	im.symlink("/sbin/modprobe", "/bin/busybox")
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "ipset", "conntrack"} {
		if _, err := im.program(tool); err != nil {
			return err
		}
	}
	// iptables is the nf_tables backend, whatever the host's alternative.
	xt, err := im.program("xtables-nft-multi")
	if err != nil {
		return err
	}
	for _, n := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		im.symlink(filepath.Join(filepath.Dir(xt), n), filepath.Base(xt))
	}
	if exts, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/xtables/*.so"); len(exts) > 0 {
		for _, e := range exts {
			im.file(e, e)
			if err := im.libraries(e); err != nil {
				return err
			}
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		f := filepath.Join(cniBinDir, p)
		im.file(f, f)
		if err := im.libraries(f); err != nil {
			return err
		}
	}
	return nil
}
