// Command pause holds a pod sandbox's namespaces: it sleeps until SIGTERM or SIGINT and, as PID 1 of a
// pod that shares its process namespace, reaps orphaned children. The local cluster's stand-in for
// registry.k8s.io/pause, built from source because no image is pulled from a registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
