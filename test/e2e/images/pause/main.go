// Command pause is the program of the registry.k8s.io/pause image the
// fixture builds: a pod sandbox's first process, which holds the pod's
// namespaces and does nothing until the runtime stops it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// As PID 1 of its PID namespace, the process gets only the signals it
	// handles: without these, SIGTERM would be ignored and every pod
	// deletion would wait for SIGKILL.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
