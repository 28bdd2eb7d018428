"""A real local Kubernetes control plane for tests and the demo, without a container runtime.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as plain processes on loopback;
kwok plays the kubelets of fake GPU nodes. The binaries are built from the Go module proxy through the
wrapper modules in `testbed/go/controlplane/` and cached outside the repository.

Modules, in import order (each imports only those above it, the standard library, PyYAML,
cryptography and, from `cluster` on, the kubernetes client):

- `layout`: where things live (repository, binary cache, runtime state) and the pinned versions.
- `stages`: the kwok stage configuration (pod/node lifecycle, PV provisioning, fault injection).
- `processes`: detached process groups, pid records, free ports, file locks.
- `build`: builds and caches the binaries (and keeps kwok's own stage files).
- `pki`: credentials (a CA, serving certificate, service-account keys, a token, a kubeconfig).
- `objects`: the fake GPU nodes and the local StorageClass.
- `cluster`: `LocalCluster`, which brings it all up, reports status and tears it down.

Nothing in the operator itself imports this package; only the CLI and the tests do.
"""
