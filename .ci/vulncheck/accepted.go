package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// acceptKey names one accepted vulnerability in one module.
type acceptKey struct {
	Module, ID string
}

// accepted maps each accepted vulnerability to the reason it cannot harm.
type accepted map[acceptKey]string

// osvID is the form of the Go vulnerability database's IDs.
var osvID = regexp.MustCompile(`^GO-\d{4}-\d{4,}$`)

// readAccepted reads accepted.txt: one acceptance a line, the module's
// folder (as named on the command line), the ID and the reason, separated
// by white space; # starts a comment.
func readAccepted(r io.Reader, name string) (accepted, error) {
	acc := accepted{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want a module's folder, a vulnerability ID and the reason it cannot harm, got %q", name, n, strings.TrimSpace(line))
		}
		k := acceptKey{Module: filepath.Clean(fields[0]), ID: fields[1]}
		if !osvID.MatchString(k.ID) {
			return nil, fmt.Errorf("%s:%d: %q is not a Go vulnerability ID (GO-YYYY-NNNN)", name, n, k.ID)
		}
		if _, dup := acc[k]; dup {
			return nil, fmt.Errorf("%s:%d: %s is accepted for %s twice", name, n, k.ID, k.Module)
		}
		acc[k] = strings.Join(fields[2:], " ")
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return acc, nil
}

// keys returns the acceptances in a stable order.
func (a accepted) keys() []acceptKey {
	ks := make([]acceptKey, 0, len(a))
	for k := range a {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(x, y acceptKey) int {
		return cmp.Or(cmp.Compare(x.Module, y.Module), cmp.Compare(x.ID, y.ID))
	})
	return ks
}
