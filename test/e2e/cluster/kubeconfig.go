package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// identity is one static-token user of the API server.
type identity struct {
	// File is the kubeconfig's name in WorkDir.
	File   string
	User   string
	UID    string
	Groups []string
	Token  string
}

// identities are the cluster's users: the administrator (the suite, the
// control plane, CoreDNS), one kubelet per node (the Node authorizer knows
// them by name and group) and the service proxy, whose user the API
// server's bootstrap policy binds to system:node-proxier.
func identities(nodes int) []identity {
	ids := []identity{
		{File: "admin.kubeconfig", User: "admin", UID: "admin", Groups: []string{"system:masters"}},
		{File: "kube-proxy.kubeconfig", User: "system:kube-proxy", UID: "kube-proxy"},
	}
	for i := 1; i <= nodes; i++ {
		ids = append(ids, identity{
			File: NodeName(i) + ".kubeconfig", User: "system:node:" + NodeName(i),
			UID: NodeName(i), Groups: []string{"system:nodes"},
		})
	}
	return ids
}

// withTokens gives every identity a fresh random token.
func withTokens(ids []identity) ([]identity, error) {
	out := make([]identity, len(ids))
	for i, id := range ids {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("cluster: token: %w", err)
		}
		id.Token = hex.EncodeToString(b[:])
		out[i] = id
	}
	return out, nil
}

// tokensCSV is the API server's --token-auth-file: token,user,uid,"groups".
func tokensCSV(ids []identity) []byte {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s,%s,%s", id.Token, id.User, id.UID)
		if len(id.Groups) > 0 {
			fmt.Fprintf(&b, ",%q", strings.Join(id.Groups, ","))
		}
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// kubeconfig is the client configuration of one identity against server,
// trusting caPEM.
func kubeconfig(server string, caPEM []byte, id identity) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[id.User] = &clientcmdapi.AuthInfo{Token: id.Token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: id.User}
	cfg.CurrentContext = "e2e"
	return cfg
}

// kubeconfigBytes serializes kubeconfig(...) as a kubeconfig file.
func kubeconfigBytes(server string, caPEM []byte, id identity) ([]byte, error) {
	b, err := clientcmd.Write(*kubeconfig(server, caPEM, id))
	if err != nil {
		return nil, fmt.Errorf("cluster: kubeconfig of %s: %w", id.User, err)
	}
	return b, nil
}
