"""One replica across pods: a LeaderWorkerSet whose every group is one MPI world.

With `serving.gpusPerPod` below the world (`ReplicaShape.GROUP`) the serving Deployment becomes a
LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) of the same pod template, `size` pods per group, one group
per replica. Both runtimes give their world as MPI segments (`Segment`); nothing here asks which runtime
it has.

- **The leader** runs the world. It waits, bounded (`GROUP_START_SECONDS`), until every worker's name
  resolves and its sshd answers, and fails naming the worker it waited for (a worker found later would
  otherwise crash-loop the whole group). Then it runs `mpirun` over SSH (no `pods/exec` permission):
  its own pod holds the first `gpusPerPod` ranks (rank 0 serves), each worker the next ones, in order.
  It keeps the server's probes; the Service selects leaders only.
- **A worker** runs sshd on `SSH_PORT` as the pods' user, with the group's host key; it is ready when
  sshd answers. It mounts what the leader mounts: its ranks read the same repository and engines.
- **The SSH keys** come from a Secret the operator generates per resource and owns (`names.ssh_secret`):
  the client key and its `authorized_keys`, the workers' host key and the leader's `known_hosts` (so the
  leader checks the workers' host key). Its data never passes through here.
- **The group** is created with the leader (`LeaderCreated`: the leader's readiness needs every rank,
  so `LeaderReady` would never start the workers) and recreated whole when one of its pods restarts
  (`RecreateGroupOnPodRestart`): an MPI world does not take a rank back.

Open MPI is told through the environment (both the 4.x and the 5.x names) to launch over `ssh -F` with
the group's config, to keep the workers' full names, and to give up on a worker's host that falls silent
within seconds (`KEEPALIVE_SECONDS`), so that a world that lost a rank ends rather than hangs. All of it
is the group shape's row of `serving.WORKLOADS` (`GROUP`): the set, its leaders for the Service, its
pods' NetworkPolicy rule, its claim's access mode, its SSH Secret, its rollout and its canary. Pure:
imports the api models, the plan's `Segment` and the vocabulary.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from mmd_operator.api.v1alpha1 import Parallelism
from mmd_operator.desired.children import Manifest, Workload
from mmd_operator.facts import OwnerRef
from mmd_operator.plan.launch import Segment
from mmd_operator.vocabulary import hashing, kinds, labels, names, ownership

# The workers' sshd: a fixed unprivileged port, so it runs as the pods' own user.
SSH_PORT = 2222
SSH_SECRET_MOUNT = "/etc/mmd-ssh"
# Copies of the private keys with the modes ssh and sshd want, and their configs: an emptyDir (its own
# mode is the kubelet's, which a non-root user cannot change; the files in it are theirs).
SSH_RUN = "/run/mmd-ssh"
SSH_VOLUME, SSH_RUN_VOLUME = "ssh-keys", "ssh-run"
# The Secret's files.
CLIENT_KEY, AUTHORIZED_KEYS = names.SSH_CLIENT_KEY, names.SSH_AUTHORIZED_KEYS
HOST_KEY, KNOWN_HOSTS = names.SSH_HOST_KEY, names.SSH_KNOWN_HOSTS
# Readable by the pods' group (fsGroup) and nobody else.
SECRET_MODE = 0o440
# How long a leader waits for all its workers (name and sshd) before it fails, naming the one missing.
GROUP_START_SECONDS = 300
# One look for a worker's sshd: a name that still gives the address of a pod gone (DNS lags a recreated
# group by seconds) would hold a connection attempt for the kernel's two minutes of retries.
PROBE_SECONDS = 5
# A worker's host silent this long (probes this many seconds apart, a connection given up after this many
# unanswered) ends the world: mpirun's ssh session and its daemons' connections probe it. The leader's
# container then exits and the group is recreated; rank 0 would otherwise pass its health checks while
# its world cannot answer.
KEEPALIVE_SECONDS, KEEPALIVE_PROBES = 5, 3
# Passed to every rank beside the server container's own environment: ssh starts no login shell.
RANK_ENV = ("PATH", "LD_LIBRARY_PATH")


def leader_selector() -> dict[str, str]:
    """The labels that pick a group's leader out of its pods (the Service's and the autoscaler's)."""
    return {labels.WORKER_INDEX: "0"}


_SSH_CONFIG = f"""Host *
  Port {SSH_PORT}
  IdentityFile {SSH_RUN}/{CLIENT_KEY}
  IdentitiesOnly yes
  UserKnownHostsFile {SSH_SECRET_MOUNT}/{KNOWN_HOSTS}
  StrictHostKeyChecking yes
  ConnectTimeout 10
  ServerAliveInterval {KEEPALIVE_SECONDS}
  ServerAliveCountMax {KEEPALIVE_PROBES}
  LogLevel ERROR"""

# The Secret's files belong to root and the pods' group, which sshd's owner check (StrictModes) refuses.
# PATH and LD_LIBRARY_PATH are the container's, for the orted and the ranks an ssh session starts.
_SSHD_CONFIG = f"""Port {SSH_PORT}
HostKey {SSH_RUN}/{HOST_KEY}
AuthorizedKeysFile {SSH_SECRET_MOUNT}/{AUTHORIZED_KEYS}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
LogLevel ERROR
SetEnv PATH="$PATH" LD_LIBRARY_PATH="${{LD_LIBRARY_PATH:-}}\""""

# LWS_LEADER_ADDRESS is <set>-<group>.<subdomain>.<namespace>; worker i is <set>-<group>-<i>.<same>.
# @GPUS@, @WAIT@ and @MPIRUN@ are filled in by `leader_script`.
_LEADER = f"""set -euo pipefail
install -m 600 {SSH_SECRET_MOUNT}/{CLIENT_KEY} {SSH_RUN}/{CLIENT_KEY}
cat > {SSH_RUN}/config <<'EOF'
{_SSH_CONFIG}
EOF
hosts=localhost:@GPUS@
deadline=$((SECONDS + @WAIT@))
for i in $(seq 1 $((LWS_GROUP_SIZE - 1))); do
  worker="${{LWS_LEADER_ADDRESS%%.*}}-$i.${{LWS_LEADER_ADDRESS#*.}}"
  until getent hosts "$worker" >/dev/null; do
    if ((SECONDS >= deadline)); then
      echo "mmd: worker $worker of this group did not resolve within @WAIT@ s:" \\
        "its pod is not running, or DNS has no record of it yet" >&2
      exit 1
    fi
    sleep 2
  done
  until timeout {PROBE_SECONDS} bash -c "exec 3<>/dev/tcp/$worker/{SSH_PORT}" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      echo "mmd: worker $worker of this group resolves, but its sshd did not answer" \\
        "on port {SSH_PORT} within @WAIT@ s" >&2
      exit 1
    fi
    sleep 2
  done
  echo "mmd: worker $worker answers on port {SSH_PORT}"
  hosts="$hosts,$worker:@GPUS@"
done
echo "mmd: starting the world on $hosts"
exec @MPIRUN@
"""

# An unquoted here-document: the container's PATH goes into the config. sshd logs to a file: the readiness
# probe's bare connections would otherwise fill the pod's log with a line each.
_WORKER = f"""set -euo pipefail
install -m 600 {SSH_SECRET_MOUNT}/{HOST_KEY} {SSH_RUN}/{HOST_KEY}
cat > {SSH_RUN}/sshd_config <<EOF
{_SSHD_CONFIG}
EOF
echo "mmd: sshd on port {SSH_PORT}; its log: {SSH_RUN}/sshd.log"
exec /usr/sbin/sshd -D -E {SSH_RUN}/sshd.log -f {SSH_RUN}/sshd_config
"""


def mpi_environment() -> dict[str, str]:
    """Open MPI's settings for a world across pods, in the names of Open MPI 4 (orte) and 5 (prte).

    Its daemons' connections probe a silent peer as ssh does (`KEEPALIVE_SECONDS`): by default a host
    that lost power is noticed only after minutes, while rank 0 goes on passing health checks.
    """
    agent = f"ssh -F {SSH_RUN}/config"
    keepalive = {
        "oob_tcp_keepalive_time": str(KEEPALIVE_SECONDS),
        "oob_tcp_keepalive_intvl": str(KEEPALIVE_SECONDS),
        "oob_tcp_keepalive_probes": str(KEEPALIVE_PROBES),
    }
    return {
        "OMPI_MCA_plm_rsh_agent": agent,
        "PRTE_MCA_plm_ssh_agent": agent,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "1",
        "PRTE_MCA_prte_keep_fqdn_hostnames": "1",
        **{f"{prefix}_MCA_{key}": value for prefix in ("OMPI", "PRTE") for key, value in keepalive.items()},
    }


def leader_script(segments: Sequence[Segment], *, gpus_per_pod: int, rank_env: Sequence[str]) -> str:
    """The leader's command: wait for every worker of its group, then run the world with `mpirun`.

    Its own pod holds the first `gpus_per_pod` ranks, each worker the next ones (`--map-by slot`).
    """
    forwarded = [arg for name in (*RANK_ENV, *rank_env) for arg in ("-x", name)]
    mpirun = ["mpirun", "--host", '"$hosts"', "--map-by", "slot", "--bind-to", "none", *forwarded]
    for index, segment in enumerate(segments):
        mpirun += [":"] if index else []
        mpirun += ["-n", str(segment.count), *map(shlex.quote, segment.argv)]
    fill = {"@GPUS@": str(gpus_per_pod), "@WAIT@": str(GROUP_START_SECONDS), "@MPIRUN@": " ".join(mpirun)}
    script = _LEADER
    for mark, value in fill.items():
        script = script.replace(mark, value)
    return script


def worker_script() -> str:
    """A worker's command: sshd on `SSH_PORT`, in the foreground, as the pods' user."""
    return _WORKER


def _ssh_volumes(instance: str) -> list[Manifest]:
    return [
        {
            "name": SSH_VOLUME,
            "secret": {"secretName": names.ssh_secret(instance), "defaultMode": SECRET_MODE},
        },
        {"name": SSH_RUN_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]


def _ssh_mounts() -> list[Manifest]:
    return [
        {"name": SSH_VOLUME, "mountPath": SSH_SECRET_MOUNT, "readOnly": True},
        {"name": SSH_RUN_VOLUME, "mountPath": SSH_RUN},
    ]


def _with_ssh(template: Manifest, instance: str, container: Manifest) -> Manifest:
    spec = template["spec"]
    return {
        **template,
        "spec": {
            **spec,
            "containers": [{**container, "volumeMounts": [*container["volumeMounts"], *_ssh_mounts()]}],
            "volumes": [*spec["volumes"], *_ssh_volumes(instance)],
        },
    }


def _leader(template: Manifest, instance: str, segments: Sequence[Segment], gpus_per_pod: int) -> Manifest:
    server = template["spec"]["containers"][0]
    env = [*server["env"], *({"name": k, "value": v} for k, v in sorted(mpi_environment().items()))]
    rank_env = [entry["name"] for entry in server["env"]]
    script = leader_script(segments, gpus_per_pod=gpus_per_pod, rank_env=rank_env)
    return _with_ssh(template, instance, {**server, "command": ["/bin/bash", "-c", script], "env": env})


def _worker(template: Manifest, instance: str, resources: Manifest) -> Manifest:
    server = template["spec"]["containers"][0]
    probes = ("startupProbe", "readinessProbe", "livenessProbe", "lifecycle")
    worker = {key: value for key, value in server.items() if key not in probes}
    worker |= {
        "command": ["/bin/bash", "-c", worker_script()],
        "resources": resources,
        "ports": [{"name": "ssh", "containerPort": SSH_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": "ssh"}, "periodSeconds": 5, "failureThreshold": 3},
    }
    return _with_ssh(template, instance, worker)


def ssh_secret(instance: str, namespace: str, owner: OwnerRef) -> Manifest:
    """The shape of the group's SSH Secret, without its keys.

    The writer creates it once, with keys of its own making (`names.SSH_SECRET_FILES`), and never
    updates it; it goes with the resource.
    """
    return {
        "apiVersion": kinds.SECRET.api_version,
        "kind": kinds.SECRET.kind,
        "metadata": {
            "name": names.ssh_secret(instance),
            "namespace": namespace,
            "labels": labels.for_instance(instance, labels.SERVING),
            "ownerReferences": [ownership.owner_reference(owner, controller=True)],
        },
        "type": "Opaque",
    }


def leader_worker_set(
    deployment: Manifest,
    parallelism: Parallelism,
    segments: Sequence[Segment],
    worker_resources: Manifest | None,
) -> Manifest:
    """The LeaderWorkerSet that serves what `deployment` (the rendered serving Deployment) would, in groups.

    Its metadata, replicas, rollout (surge or in place, one group at a time) and pod template are the
    Deployment's, a worker's server container with `worker_resources` (it runs no server of its own,
    only its ranks); the template digest covers both of its templates.
    """
    assert worker_resources is not None, "a replica across pods has workers"
    metadata, spec = deployment["metadata"], deployment["spec"]
    instance = metadata["labels"][labels.INSTANCE]
    # Each template its own copy: they share no object (a YAML dump would write anchors and aliases).
    template = spec["template"]
    leader = _leader(copy.deepcopy(template), instance, segments, parallelism.gpus_per_pod)
    worker = _worker(copy.deepcopy(template), instance, worker_resources)
    rolling = spec["strategy"]["rollingUpdate"]
    group = {
        "size": parallelism.pods_per_replica,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": leader,
        "workerTemplate": worker,
    }
    annotations = {**metadata.get("annotations", {}), labels.TEMPLATE_DIGEST: hashing.digest(group)}
    return {
        "apiVersion": kinds.LEADER_WORKER_SET.api_version,
        "kind": kinds.LEADER_WORKER_SET.kind,
        "metadata": {**metadata, "name": names.group_set(instance), "annotations": annotations},
        "spec": {
            **({"replicas": spec["replicas"]} if "replicas" in spec else {}),
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {
                    "maxSurge": rolling["maxSurge"],
                    "maxUnavailable": rolling["maxUnavailable"],
                },
            },
            "networkConfig": {"subdomainPolicy": "Shared"},
            "leaderWorkerTemplate": group,
        },
    }


def within_groups(instance: str, rules: dict[str, Any]) -> dict[str, Any]:
    """`rules` and, for each direction they restrict, every port between the resource's serving pods.

    A world across pods speaks MPI and NCCL on ports it picks at start. A policy cannot name one group's
    pods (their group label varies), so the rule admits the resource's serving pods: its groups.
    """
    peers = [{"podSelector": {"matchLabels": labels.serving_selector(instance)}}]
    directions = {"Ingress": ("ingress", "from"), "Egress": ("egress", "to")}
    widened = dict(rules)
    for kind in rules["policyTypes"]:
        key, side = directions[kind]
        widened[key] = [*rules.get(key, []), {side: peers}]
    return widened


def canary_set(manifest: Manifest, name: str, track: dict[str, str]) -> Manifest:
    """A LeaderWorkerSet `name` of one group of `manifest`'s revision, its pods carrying `track`.

    Its leader is a leader: the Service sends it its share of the requests.
    """
    spec = manifest["spec"]
    group = spec["leaderWorkerTemplate"]

    def tracked(template: Manifest) -> Manifest:
        metadata = template["metadata"]
        return {**template, "metadata": {**metadata, "labels": {**metadata["labels"], **track}}}

    return {
        **manifest,
        "metadata": {**manifest["metadata"], "name": name},
        "spec": {
            **spec,
            "replicas": 1,
            "leaderWorkerTemplate": {
                **group,
                "leaderTemplate": tracked(group["leaderTemplate"]),
                "workerTemplate": tracked(group["workerTemplate"]),
            },
        },
    }


def _ssh_secrets(instance: str, namespace: str, owner: OwnerRef) -> list[Manifest]:
    return [ssh_secret(instance, namespace, owner)]


def _leader_pod(manifest: Manifest) -> Manifest:
    spec: Manifest = manifest["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    return spec


# The serving workload of a replica across pods.
GROUP = Workload(
    kind=kinds.LEADER_WORKER_SET,
    name=names.group_set,
    made=leader_worker_set,
    serving_pods=MappingProxyType(leader_selector()),
    policy_rules=within_groups,
    # Every pod of a group mounts the claim, each from its own node.
    claim_access="ReadWriteMany",
    secrets=_ssh_secrets,
    rollout=("rolloutStrategy", "rollingUpdateConfiguration"),
    template="leaderWorkerTemplate",
    canary=canary_set,
    serving_pod=_leader_pod,
)
