"""The kwok stage configuration: what the fake kubelets and the fake volume provisioner do.

Starts from kwok's own stage files of the pinned version (copied into the binary cache by `build`):
nodes become Ready and renew their leases; scheduled pods become Running and Ready; pods owned by a
Job succeed; deleted pods disappear. On top of that:

- Scripted outcomes (fault injection, mostly). A pod labelled `localcluster.mmd.dev/fault` is left
  alone by the normal stages and instead: `fail` - its containers exit (code from the annotation
  `localcluster.mmd.dev/fault-exit-code`, default 1; termination message from
  `localcluster.mmd.dev/fault-message`) and the pod phase becomes Failed; `crashloop` - Running, never
  Ready, containers in CrashLoopBackOff; `never-ready` - Running with running containers that never
  become Ready; `succeed` - its containers exit 0 with the termination message from the same annotation
  and the pod Succeeds (a build Job reporting its summary).
- Volume provisioning. kwok plays the external provisioner of the `local` StorageClass: once the PV
  controller in kube-controller-manager has annotated a claim as waiting for this provisioner, kwok
  creates a hostPath PV pre-bound to the claim, and the PV controller binds the two (real binding, real
  phases). A Released PV of the class is deleted, as a provisioner with reclaimPolicy Delete does.

Imports: the standard library and PyYAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FAULT_LABEL = "localcluster.mmd.dev/fault"
FAULT_MESSAGE_ANNOTATION = "localcluster.mmd.dev/fault-message"
FAULT_EXIT_CODE_ANNOTATION = "localcluster.mmd.dev/fault-exit-code"
FAULTS = ("fail", "crashloop", "never-ready", "succeed")

STORAGE_CLASS = "local"
PROVISIONER = "localcluster.mmd.dev/kwok-volume"

# kwok's stage files of the pinned version, relative to the copy the build keeps.
UPSTREAM_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
# The upstream pod stages that must ignore pods carrying a fault label.
_STAGES_SKIPPING_FAULTY_PODS = ("pod-ready", "pod-complete")

_HOST_AND_POD_IPS = """
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $hostNetwork := or .spec.hostNetwork false }}
{{ $uid := or .metadata.uid "" }}
{{ $name := or .metadata.name "" }}
{{ $namespace := or .metadata.namespace "" }}
{{ $podIPs := PodIPsWith .spec.nodeName $hostNetwork $uid $name $namespace }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
startTime: {{ $now | Quote }}
"""

_FAULT_VALUES = f"""
{{{{ $now := Now }}}}
{{{{ $message := "" }}}}
{{{{ $exitCode := "" }}}}
{{{{ with .metadata.annotations }}}}
{{{{ $message = index . "{FAULT_MESSAGE_ANNOTATION}" }}}}
{{{{ $exitCode = index . "{FAULT_EXIT_CODE_ANNOTATION}" }}}}
{{{{ end }}}}
"""

_NOT_READY_CONDITIONS = """
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: ContainersReady
"""


def _finished_template(*, phase: str, exit_code: str, reason: str, ready_reason: str, message: str) -> str:
    """Status of a pod whose containers terminated; `exit_code` and `message` are template expressions."""
    return (
        _FAULT_VALUES
        + f"""
conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "True"
  type: Initialized
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "False"
  reason: {ready_reason}
  type: Ready
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "False"
  reason: {ready_reason}
  type: ContainersReady
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {{{{ {exit_code} }}}}
      reason: {reason}
      message: {{{{ {message} | Quote }}}}
      startedAt: {{{{ $now | Quote }}}}
      finishedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
phase: {phase}
"""
        + _HOST_AND_POD_IPS
    )


_FAIL_TEMPLATE = _finished_template(
    phase="Failed",
    exit_code='or $exitCode "1"',
    reason="Error",
    ready_reason="ContainersNotReady",
    message='or $message "injected failure"',
)

_CRASHLOOP_TEMPLATE = (
    _FAULT_VALUES
    + _NOT_READY_CONDITIONS
    + """
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 3
  started: false
  state:
    waiting:
      reason: CrashLoopBackOff
      message: {{ printf "back-off 40s restarting failed container=%s" .name | Quote }}
  lastState:
    terminated:
      exitCode: {{ or $exitCode "1" }}
      reason: Error
      message: {{ or $message "injected crash" | Quote }}
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
phase: Running
"""
    + _HOST_AND_POD_IPS
)

_NEVER_READY_TEMPLATE = (
    _FAULT_VALUES
    + _NOT_READY_CONDITIONS
    + """
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Running
"""
    + _HOST_AND_POD_IPS
)

_SUCCEED_TEMPLATE = _finished_template(
    phase="Succeeded", exit_code="0", reason="Completed", ready_reason="PodCompleted", message="$message"
)

_FAULT_TEMPLATES = {
    "fail": _FAIL_TEMPLATE,
    "crashloop": _CRASHLOOP_TEMPLATE,
    "never-ready": _NEVER_READY_TEMPLATE,
    "succeed": _SUCCEED_TEMPLATE,
}

_PROVISIONED_PV = f"""
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pvc-{{{{ .metadata.uid }}}}
  annotations:
    pv.kubernetes.io/provisioned-by: {PROVISIONER}
spec:
  accessModes:
  {{{{ YAML .spec.accessModes 2 }}}}
  capacity:
    storage: {{{{ index .spec.resources.requests "storage" | Quote }}}}
  persistentVolumeReclaimPolicy: Delete
  storageClassName: {STORAGE_CLASS}
  volumeMode: {{{{ or .spec.volumeMode "Filesystem" | Quote }}}}
  claimRef:
    apiVersion: v1
    kind: PersistentVolumeClaim
    name: {{{{ .metadata.name | Quote }}}}
    namespace: {{{{ .metadata.namespace | Quote }}}}
    uid: {{{{ .metadata.uid | Quote }}}}
  hostPath:
    path: /var/lib/mmd-local-volumes/pvc-{{{{ .metadata.uid }}}}
"""


def _stage(name: str, kind: str, selector: dict[str, Any], next_step: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind}, "selector": selector, **next_step},
    }


def _fault_stage(fault: str) -> dict[str, Any]:
    selector = {
        "matchExpressions": [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
            {"key": f'.metadata.labels["{FAULT_LABEL}"]', "operator": "In", "values": [fault]},
        ]
    }
    return _stage(
        f"pod-fault-{fault}", "Pod", selector, {"next": {"statusTemplate": _FAULT_TEMPLATES[fault]}}
    )


def _cel(*expressions: str) -> dict[str, Any]:
    return {"matchExpressions": [{"cel": {"expression": expression}} for expression in expressions]}


def _volume_stages() -> list[dict[str, Any]]:
    in_class = f"has(self.spec.storageClassName) && self.spec.storageClassName == '{STORAGE_CLASS}'"
    provision = _stage(
        "pvc-provision-local",
        "PersistentVolumeClaim",
        _cel(
            in_class,
            "!has(self.metadata.deletionTimestamp)",
            "!has(self.spec.volumeName)",
            # Act only once the PV controller has handed the claim to this provisioner.
            "has(self.metadata.annotations) && "
            "'volume.kubernetes.io/storage-provisioner' in self.metadata.annotations && "
            f"self.metadata.annotations['volume.kubernetes.io/storage-provisioner'] == '{PROVISIONER}'",
        ),
        {"steps": [{"apply": {"template": _PROVISIONED_PV}}]},
    )
    delete_released = _stage(
        "pv-delete-released-local",
        "PersistentVolume",
        _cel(
            in_class,
            "!has(self.metadata.deletionTimestamp)",
            "self.spec.persistentVolumeReclaimPolicy == 'Delete'",
            "has(self.status.phase) && self.status.phase == 'Released'",
        ),
        {"steps": [{"delete": True}]},
    )
    return [provision, delete_released]


def stage_documents(upstream_dir: Path) -> list[dict[str, Any]]:
    """Return every Stage: kwok's own (adjusted to skip faulty pods), faults, volumes."""
    documents: list[dict[str, Any]] = []
    for relative in UPSTREAM_STAGE_FILES:
        stage: dict[str, Any] = yaml.safe_load((upstream_dir / relative).read_text())
        if stage["metadata"]["name"] in _STAGES_SKIPPING_FAULTY_PODS:
            stage["spec"]["selector"]["matchExpressions"].append(
                {"key": f'.metadata.labels["{FAULT_LABEL}"]', "operator": "DoesNotExist"}
            )
        documents.append(stage)
    documents += [_fault_stage(fault) for fault in FAULTS]
    documents += _volume_stages()
    return documents


def write_kwok_config(path: Path, upstream_dir: Path) -> None:
    """Write the multi-document kwok configuration (for `kwok --config`)."""
    path.write_text(yaml.safe_dump_all(stage_documents(upstream_dir), sort_keys=False))
