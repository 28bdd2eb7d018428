"""A real local Kubernetes cluster for tests and the demo, without a container runtime on the host.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as plain processes on loopback; kwok
plays the kubelets of fake GPU nodes; real nodes run kubelet, containerd and runc. The binaries are built
from the Go module proxy through the wrapper modules in `testbed/go/` and cached outside the repository.

The control plane:
- `layout`: where things live (repository, binary cache, runtime state) and the pinned versions;
- `processes`: detached process groups, pid records, free ports, file locks;
- `binaries`: builds and caches the control plane's binaries (and keeps kwok's own stage files);
- `stages`: the kwok stage configuration (pod and node lifecycle, volume provisioning, faults);
- `pki`: credentials (a CA, serving certificates, service-account keys, a token, a kubeconfig);
- `objects`: the fake GPU nodes (GPU models, per pool or per node, and their labels) and the local
  StorageClass;
- `audit`: the API server's audit log of writes, and reading it;
- `state`: where a cluster keeps its files, what it records of itself there, and the status it reports;
- `components`: the command line of each control-plane component, and its health check;
- `cluster`: `LocalCluster`, which brings it all up, reports its status and tears it down.

Real nodes and what runs on them:
- `nodebinaries`: builds what a real node runs (kubelet, containerd, CNI, add-ons);
- `network`: the nodes' private network, host bridge and namespaces;
- `nodes`: one real node's processes;
- `fakegpu`: the nodes' fake GPUs: a device plugin double (built from `testbed/go/nodes/fake-gpu`) that
  registers `nvidia.com/gpu` with each kubelet and tells containers which GPUs they got;
- `realnodes`: the real nodes of a cluster: host checks, processes, node objects, routes, add-ons;
- `addons`: DNS, volumes and RBAC, with images of their own;
- `ocilayout`: container images as OCI archives, loaded into a node's containerd;
- `images`: the CPU stand-ins of the project's images, built from the Dockerfile;
- `image_build`: what building any of the images needs: names, the wheelhouse, the chart values;
- `hub`: the Hugging Face Hub's double in a pod;
- `metricsbinaries`, `monitoring`: Prometheus and prometheus-adapter, built and run as pods;
- `lwsbinaries`, `leaderworkerset`: the LeaderWorkerSet controller, built and run as a pod;
- `gitops_check`: the GitOps health checker (kstatus and an Argo CD Lua check) of `testbed/go/gitops`;
- `builds`: what a command needs built, two Go caches at a time and the images beside them.

Imports the standard library, PyYAML, cryptography and the kubernetes client; the operator imports
nothing of it.
"""
