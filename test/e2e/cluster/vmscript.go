package cluster

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// vmModules are loaded at boot: the NIC, what containerd, the bridge CNI
// and every proxy mode need (the kernel loads the rest on demand).
var vmModules = []string{
	"virtio_pci", "virtio_net", "overlay", "br_netfilter", "nf_conntrack", "veth", "bridge", "dummy",
	"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_tables", "nft_compat",
	"ip_set", "ip_set_hash_ip", "ip_set_hash_ipport", "ip_set_hash_ipportip", "ip_set_hash_ipportnet",
	"ip_set_hash_net", "ip_set_bitmap_port", "xt_set", "xt_comment", "xt_mark", "xt_conntrack",
	"xt_MASQUERADE", "xt_addrtype",
}

// vmInit is vm's /init: mounts, modules, network, the control server,
// containerd with the images imported, then kubelet.
func (c *Cluster) vmInit(vm vmNode, all []vmNode, kubeconfig string) string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
export PATH=` + processPath + ` HOME=/root
mark() { echo "vmnode: $(cut -d' ' -f1 /proc/uptime)s $* (MemAvailable $(awk '/MemAvailable/{print $2}' /proc/meminfo) kB)"; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs -o mode=755 tmpfs /var/lib
mount -t tmpfs -o mode=755 tmpfs /var/log
ln -s /run /var/run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount --make-rshared /
echo /sbin/modprobe > /proc/sys/kernel/modprobe
mark init
`)
	fmt.Fprintf(&b, "for m in %s; do modprobe $m || echo \"vmnode: modprobe $m failed\"; done\n", strings.Join(vmModules, " "))
	fmt.Fprintf(&b, `echo "+cpu +cpuset +memory +pids +io" > /sys/fs/cgroup/cgroup.subtree_control
hostname %[1]s
i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
ip link set lo up
ip addr add %[2]s dev eth0
ip link set eth0 up
ip route add default via %[3]s
`, vm.name, netip.PrefixFrom(vm.ip, fabricBits), BridgeIP)
	for _, o := range all {
		if o.k != vm.k {
			fmt.Fprintf(&b, "ip route add %s via %s\n", o.podCIDR, o.ip)
		}
	}
	fmt.Fprintf(&b, `sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
mkdir -p %[1]s /var/lib/kubelet
cp %[2]s %[3]s
busybox httpd -p %[4]s -h /srv
mark network
containerd --config %[5]s >> /var/log/containerd.log 2>&1 &
until ctr version >/dev/null 2>&1; do sleep 0.2; done
mark containerd
`, cniConfDir, filepath.Join(vm.dir, "cni.conflist"), cniConfFile, netip.AddrPortFrom(vm.ip, vmCtlPort), filepath.Join(vm.dir, "containerd.toml"))
	for _, img := range c.cfg.Images {
		// Each tarball is removed once imported: its memory is the VM's.
		fmt.Fprintf(&b, "ctr -n k8s.io images import %[1]s >> /var/log/images.log 2>&1 || echo \"vmnode: import %[1]s failed\"; rm -f %[1]s\n", img)
	}
	fmt.Fprintf(&b, `mark images
%[1]s --kubeconfig=%[2]s --config=%[3]s --hostname-override=%[4]s --node-ip=%[5]s --v=1 >> /var/log/kubelet.log 2>&1 &
mark kubelet
while sleep 60; do mark running; done
`, c.cfg.Bin.Kubelet, kubeconfig, filepath.Join(vm.dir, "kubelet.yaml"), vm.name, vm.ip)
	return b.String()
}

// vmCtlScript is the VM's control CGI: ctl?ACTION+NAME with the command
// line, one argument a line, as the body. start runs it in the
// background logging to /var/log/NAME.log, alive says yes or no, stop
// sends SIGTERM and after 30 s SIGKILL, exec runs it and prints its
// output and "exit: N".
const vmCtlScript = `#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
action=${QUERY_STRING%%+*} name=${QUERY_STRING#*+}
set --
if [ "${CONTENT_LENGTH:-0}" -gt 0 ]; then
	while IFS= read -r l; do set -- "$@" "$l"; done <<END
$(head -c "$CONTENT_LENGTH")
END
fi
alive() { [ -f "/run/$1.pid" ] && p=$(cat "/run/$1.pid") && [ -d "/proc/$p" ] && ! grep -q '^State:.Z' "/proc/$p/status"; }
case $action in
start) setsid "$@" </dev/null >>"/var/log/$name.log" 2>&1 & echo $! > "/run/$name.pid"; echo "started $!";;
alive) alive "$name" && echo yes || echo no;;
stop) if alive "$name"; then p=$(cat "/run/$name.pid"); kill "$p"; i=0; while alive "$name" && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; kill -9 "$p" 2>/dev/null; fi; rm -f "/run/$name.pid"; echo stopped;;
exec) "$@" </dev/null 2>&1; echo "exit: $?";;
*) echo "unknown action $action";;
esac
`
