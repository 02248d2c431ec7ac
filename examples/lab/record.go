package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// DefaultStateDir is where a lab records what it made, one file per
// prefix: /run, like ip's /run/netns, is root's and empty after a reboot,
// when the namespaces are gone too.
const DefaultStateDir = "/run/proxykit-lab"

// netnsDir is where ip(8) mounts the namespaces it names.
const netnsDir = "/run/netns"

// record is what one lab made, as --down finds it: each namespace with
// the identity of its mount (a namespace deleted and made again under the
// same name by someone else has another), each process with its start
// time (a PID used again by another process has another), and its folder.
type record struct {
	Namespaces []madeNS   `json:"namespaces"`
	Processes  []madeProc `json:"processes"`
	Dir        string     `json:"dir,omitempty"`
}

type madeNS struct {
	Name     string `json:"name"`
	Dev, Ino uint64
}

type madeProc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// statePath is the record of the lab of prefix in dir.
func statePath(dir, prefix string) string { return filepath.Join(dir, prefix+".json") }

// nsIdentity is the device and inode of the namespace ip(8) named name.
func nsIdentity(name string) (dev, ino uint64, err error) {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(netnsDir, name), &st); err != nil {
		return 0, 0, err
	}
	return st.Dev, st.Ino, nil
}

// startTime is when process pid started, in clock ticks after boot (the
// 22nd field of /proc/PID/stat).
func startTime(pid int) (uint64, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count after it.
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, data)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// save writes the lab's record: a new file renamed over the old one, so
// that a lab killed at any moment leaves a whole record.
func (l *Lab) save() error {
	r := record{Namespaces: l.made, Dir: l.dir}
	for _, c := range l.procs {
		if c.Process != nil {
			r.Processes = append(r.Processes, l.started[c])
		}
	}
	if l.agent != nil && l.agent.Process != nil {
		r.Processes = append(r.Processes, l.started[l.agent])
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(l.cfg.StateDir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(l.cfg.StateDir, ".record-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), statePath(l.cfg.StateDir, l.cfg.Prefix))
}

// recordStart records a process the lab just started.
func (l *Lab) recordStart(c *exec.Cmd) error {
	s, err := startTime(c.Process.Pid)
	if err != nil {
		return err
	}
	if l.started == nil {
		l.started = map[*exec.Cmd]madeProc{}
	}
	l.started[c] = madeProc{PID: c.Process.Pid, Start: s}
	return l.save()
}

// RemoveRecorded removes what the lab of prefix recorded in stateDir and
// is still as it made it: it kills its processes and deletes its
// namespaces and folder. A namespace of the prefix it did not make, a
// process it did not start, is left alone and named in out.
func RemoveRecorded(stateDir, prefix string, out io.Writer) error {
	path := statePath(stateDir, prefix)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(out, "no lab of prefix %s is recorded (%s): nothing removed\n", prefix, path)
		if left, err := Namespaces(prefix); err == nil && len(left) > 0 {
			fmt.Fprintf(out, "left alone, not made by a lab: namespaces %s\n", strings.Join(left, ", "))
		}
		return nil
	}
	if err != nil {
		return err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var ours []string
	for _, p := range r.Processes {
		if s, err := startTime(p.PID); err == nil && s == p.Start {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			ours = append(ours, strconv.Itoa(p.PID))
		}
	}
	var errs []error
	for _, ns := range slices.Backward(r.Namespaces) {
		dev, ino, err := nsIdentity(ns.Name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		case dev != ns.Dev || ino != ns.Ino:
			fmt.Fprintf(out, "left alone: namespace %s is not the one the lab made\n", ns.Name)
			continue
		}
		if pids, err := exec.Command("ip", "netns", "pids", ns.Name).Output(); err == nil {
			for _, pid := range strings.Fields(string(pids)) {
				if !slices.Contains(ours, pid) {
					fmt.Fprintf(out, "left running: process %s in namespace %s, not started by the lab (the namespace lives on until it ends)\n", pid, ns.Name)
				}
			}
		}
		if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", ns.Name, err, out))
			continue
		}
		fmt.Fprintln(out, "deleted namespace", ns.Name)
	}
	// Only a folder where the lab makes them: the record names no other.
	if r.Dir != "" && filepath.Dir(r.Dir) == filepath.Clean(os.TempDir()) && strings.HasPrefix(filepath.Base(r.Dir), prefix+"-") {
		errs = append(errs, os.RemoveAll(r.Dir))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.Remove(path)
}
