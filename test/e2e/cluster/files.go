package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// File names in WorkDir.
const (
	caCertFile     = "pki/ca.crt"
	caKeyFile      = "pki/ca.key"
	serverCertFile = "pki/apiserver.crt"
	serverKeyFile  = "pki/apiserver.key"
	saPubFile      = "pki/sa.pub"
	saKeyFile      = "pki/sa.key"
	tokensFile     = "pki/tokens.csv"
	containerdFile = "containerd.toml"
	corefileFile   = "Corefile"
	resolvFile     = "resolv.conf"
)

// path is name's path in WorkDir.
func (c *Cluster) path(name string) string { return filepath.Join(c.cfg.WorkDir, name) }

// writeFiles writes every file the processes read: a fresh PKI and fresh
// tokens, the kubeconfigs, and each node's configurations. They stay in
// WorkDir, which every node sees (only /run, /var/lib and /var/log are
// private to a node).
func (c *Cluster) writeFiles() error {
	p, err := newPKI(time.Now())
	if err != nil {
		return err
	}
	ids, err := withTokens(identities(c.cfg.Nodes + c.cfg.vmNodes()))
	if err != nil {
		return err
	}
	files := map[string][]byte{
		caCertFile: p.CACert, caKeyFile: p.CAKey, serverCertFile: p.ServerCert, serverKeyFile: p.ServerKey,
		saPubFile: p.SAPublicKey, saKeyFile: p.SAPrivateKey, tokensFile: tokensCSV(ids),
		containerdFile: containerdConfig(), resolvFile: resolvConf(),
		corefileFile: corefile(c.path("admin.kubeconfig")),
	}
	for _, id := range ids {
		b, err := kubeconfigBytes(APIServerURL(), p.CACert, id)
		if err != nil {
			return err
		}
		files[id.File] = b
	}
	for path, v := range kubeletTunables() {
		files[tunableFile(path)] = []byte(strconv.Itoa(v) + "\n")
	}
	for i := 1; i <= c.cfg.Nodes; i++ {
		b, err := kubeletConfigYAML(i, c.cg.nodeRoot(i))
		if err != nil {
			return err
		}
		files[filepath.Join(NodeName(i), "kubelet.yaml")] = b
	}
	for name, b := range files {
		path := c.path(name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		perm := os.FileMode(0o644)
		if filepath.Dir(name) == "pki" || filepath.Ext(name) == ".kubeconfig" {
			perm = 0o600
		}
		if err := os.WriteFile(path, b, perm); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	return nil
}
