// Package cluster is the real-cluster fixture of proxykit's upstream e2e
// runs: one to three Kubernetes nodes on one machine, each a network and
// mount namespace of its own running containerd and kubelet, the control
// plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
// CoreDNS as processes) on the first, all joined by a bridge in a "runner"
// namespace where the suite and kubectl run, outside the cluster as on a CI
// runner.
//
// Nothing it does touches the machine's own network namespace or mounts:
// links, routes and rules live in namespaces held by holder processes, the
// nodes' /run, /var/lib and /var/log are tmpfs mounts private to each
// node's mount namespace (so containerd, kubelet and the CNI plugins keep
// their default paths), and every process the fixture starts, holders
// included, sits in the cluster's directory proxykit-e2e/<id> of every
// mounted cgroup hierarchy (kubelet's cgroupRoot is node-<i> there). The
// process that made a cluster holds a flock(2) on its directory until
// [Cluster.Down]; [Reclaim] kills what the directories whose lock is free
// hold (a killed run's) and removes them, which removes the namespaces
// with their last process. [Up] calls it first, so a killed run is cleaned
// up by the next, while clusters of live processes run side by side (each
// fabric is a namespace of its own, so their addresses never meet). A
// cluster left up on purpose when its process exits counts as left too:
// it runs until the next Up or Reclaim.
//
// Addresses: the runner's bridge br0 is 10.88.0.1/24, node i (1-based) is
// e2e-node-<i> at 10.88.0.<i+1> on its eth0, the API server listens on
// 10.88.0.2:6443, Services get 10.96.0.0/16 (kube-dns is 10.96.0.10,
// served by CoreDNS on 10.88.0.2:53) and pods 10.244.0.0/16, a /24 per
// node allocated by kube-controller-manager and routed through the node's
// IP from the runner and every other node.
//
// The fixture starts no service proxy: [Cluster.StartProxy] runs one (the
// node agent or kube-proxy, both with kube-proxy's command line) on every
// node and [Cluster.StopProxy] stops it and runs its --cleanup.
//
// What the machine needs: root; util-linux's unshare and nsenter,
// iproute2's ip, procps' sysctl; Debian's containerd (1.6, whose ctr
// imports the images), runc and containernetworking-plugins (bridge,
// host-local, portmap in /usr/lib/cni); iptables and nft for the proxies.
// Kernel settings kubelet would set machine-wide (kernel.panic,
// vm.overcommit_memory...) are shown to it at its values through files
// bound over them in each node, so it writes none; the proxies' conntrack
// timeouts are per namespace and left to them, the conntrack table's size
// (machine-wide) is not. The kernel of the machines this runs on has no
// SCTP sockets (CONFIG_IP_SCTP unset), so the suite's SCTP connectivity
// tests cannot pass on namespace nodes.
//
// [Config.VM] makes the worker nodes virtual machines instead, for the
// proxy modes the machine's kernel cannot run (IPVS): Debian's cloud
// kernel under qemu with TCG, booted from an initramfs the fixture writes
// (busybox, containerd, runc, the CNI plugins, kubelet, the proxies, the
// images), its NIC a tap device on br0. VM k is node e2e-node-<k+1> at
// 10.88.0.<k+2> with pod subnet 10.244.<100+k>.0/24; node 1's namespace
// keeps the control plane and is tainted as its node, so no test pod lands
// where no proxy runs. The proxy runs in the VMs through a control script
// (busybox httpd CGI on port 10999), and Down saves the VMs' logs beside
// qemu's console in WorkDir/<node>/.
package cluster
