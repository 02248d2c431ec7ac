package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
)

// statesPath is where the agent's metrics server serves its model: the
// State each family's dataplane last programmed, which the subcommands'
// --agent reads so that they answer from exactly what the agent programs.
const statesPath = "/proxykit/states"

// agentModel is what statesPath serves.
type agentModel struct {
	// Mode is the agent's --proxy-mode, which decides how the kernel's
	// rules are read and which mode's Lookup answers.
	Mode   string             `json:"mode"`
	States []*dataplane.State `json:"states"`
}

// statesHandler serves the planes' last States to clients on this node
// only: the metrics server often listens on every address for
// Prometheus, and the model names every service and pod of the cluster.
func (o *options) statesHandler(planes []plane) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if a, err := netip.ParseAddr(host); err != nil || !a.Unmap().IsLoopback() {
			http.Error(w, "the model is served to clients on this node only (connect to a loopback address)", http.StatusForbidden)
			return
		}
		m := agentModel{Mode: o.proxyMode, States: []*dataplane.State{}}
		for _, pl := range planes {
			if st := pl.last.Load(); st != nil {
				m.States = append(m.States, st)
			}
		}
		if len(m.States) == 0 {
			http.Error(w, "the agent has not programmed its first sync yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(m)
	})
}

// agentTimeout bounds the whole exchange with the agent, reading included.
const agentTimeout = 30 * time.Second

// fetchModel reads the running agent's model from its metrics server at
// addr (host:port, or a URL with or without its path).
func fetchModel(ctx context.Context, addr string) (*agentModel, error) {
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	if !strings.HasSuffix(url, statesPath) {
		url = strings.TrimSuffix(url, "/") + statesPath
	}
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--agent %s: %w", addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("--agent %s: no agent listens there (its --metrics-bind-address, 127.0.0.1:10249 by default)", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("--agent %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg := strings.TrimSpace(string(body))
		if resp.StatusCode == http.StatusNotFound {
			msg = "it serves no model at " + statesPath + " (not a proxykit node agent, or an older one)"
		}
		return nil, fmt.Errorf("--agent %s: %s: %s", addr, resp.Status, msg)
	}
	var m agentModel
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return nil, fmt.Errorf("--agent %s: %w", addr, err)
	}
	if len(m.States) == 0 || slices.Contains(m.States, nil) {
		return nil, fmt.Errorf("--agent %s: the agent sent no model", addr)
	}
	if err := checkMode(m.Mode); err != nil {
		return nil, fmt.Errorf("--agent %s: the agent's mode: %w", addr, err)
	}
	return &m, nil
}

// modelStates returns the model the subcommands answer from, of families
// (in that order): the running agent's with --agent, whose mode then
// becomes the subcommand's, else the one built from the source as the
// agent would build it.
func (o *options) modelStates(ctx context.Context, log logr.Logger, src *input, families ...v1.IPFamily) ([]*dataplane.State, error) {
	if o.agent == "" {
		return builtStates(ctx, src, dataplane.BuilderConfig{
			Families: families,
			NodeName: src.nodeName,
			Settings: o.settings(),
			Logger:   log,
		})
	}
	m, err := fetchModel(ctx, o.agent)
	if err != nil {
		return nil, err
	}
	if o.set["proxy-mode"] && o.proxyMode != m.Mode {
		return nil, fmt.Errorf("--proxy-mode %s, but the agent at %s runs in mode %s", o.proxyMode, o.agent, m.Mode)
	}
	o.proxyMode = m.Mode
	var states []*dataplane.State
	for _, f := range families {
		for _, st := range m.States {
			if st.Family == f {
				states = append(states, st)
			}
		}
	}
	if len(states) == 0 {
		return nil, fmt.Errorf("the agent at %s proxies no %s", o.agent, strings.Join(familyNames(families), " or "))
	}
	return states, nil
}

func familyNames(fs []v1.IPFamily) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f)
	}
	return out
}
