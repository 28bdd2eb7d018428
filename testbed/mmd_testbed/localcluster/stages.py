"""The kwok stage configuration: what the fake kubelets and the fake volume provisioner do.

Starts from kwok's own stage files of the pinned version (copied into the binary cache by `build`):
nodes become Ready and renew their leases; scheduled pods become Running and Ready; pods owned by a
Job succeed; deleted pods disappear. On top of that:

- The engine builder. A pod labelled as an engine-build pod (`app.kubernetes.io/component:
  engine-build` and a `serving.multimodal.dev/cache-key` label) and without a fault label becomes
  Running and Ready like any pod, then, after `localcluster.mmd.dev/build-duration` (a Go duration on
  the pod, default 2 s), ends the way the real builder reports success: every container exits 0
  (Completed) with a `BuildSucceeded` JSON line as its termination message, whose cache_key is the pod's
  cache-key label, whose GPU count is the container's `nvidia.com/gpu` limit (1 without one) and whose
  GPU is the model of the cluster's node pool; the pod Succeeds. kwok's own `pod-complete` skips these
  pods, so the two stages never race.
- The weights download (the trtllm-serve runtime). A pod labelled `app.kubernetes.io/component:
  weights-download` and without a fault label becomes Running and Ready, then, after the same
  `localcluster.mmd.dev/build-duration`, ends the way `python -m engine_builder download` reports success:
  a `DownloadSucceeded` line for the plan its container was given (`--plan-json`, the third argument):
  the revision itself when it is a commit, else the made-up commit sha1("<repo>@<revision>") (what the
  tests' `downloads.commit_of` computes), and the snapshot key of that commit, computed as
  `weights_format.weights_key` does (sprig's sha256sum of the same canonical JSON).
- Scripted outcomes (fault injection, mostly). A pod labelled `localcluster.mmd.dev/fault` is left
  alone by the normal stages (and by the engine-builder stage) and instead: `fail` - its containers exit
  (code from the annotation `localcluster.mmd.dev/fault-exit-code`, default 1; termination message from
  `localcluster.mmd.dev/fault-message`; how it ended, the kubelet's reason, from
  `localcluster.mmd.dev/fault-reason`, default Error) and the pod phase becomes Failed; `crashloop` -
  Running, never Ready, containers in CrashLoopBackOff (their last end as `fail` says it); `never-ready`
  - Running with running containers that never become Ready; `succeed` - its containers exit 0 with the
  termination message from the same annotation and the pod Succeeds (a build Job reporting its summary).
  A fault label of any other value leaves the pod to the test, which writes its status itself (as the
  kubelet would); without the label, the normal stages take the pod from there.
- Volume provisioning. kwok plays the external provisioner of the `local` StorageClass: once the PV
  controller in kube-controller-manager has annotated a claim as waiting for this provisioner, kwok
  creates a hostPath PV pre-bound to the claim, and the PV controller binds the two (real binding, real
  phases). A Released PV of the class is deleted, as a provisioner with reclaimPolicy Delete does.

Imports: the standard library, PyYAML, the engine builder's result and weights formats and version pins,
and the operator's label keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from engine_builder import versions
from engine_builder.result_format import BuildSucceeded, Gpu, Versions
from engine_builder.weights_format import WEIGHTS_FORMAT_VERSION, WEIGHTS_KEY_LENGTH, DownloadSucceeded
from mmd_operator.vocabulary import labels

FAULT_LABEL = "localcluster.mmd.dev/fault"
FAULT_MESSAGE_ANNOTATION = "localcluster.mmd.dev/fault-message"
FAULT_EXIT_CODE_ANNOTATION = "localcluster.mmd.dev/fault-exit-code"
# How the kubelet says a `fail` or `crashloop` container ended (default Error): OOMKilled, say.
FAULT_REASON_ANNOTATION = "localcluster.mmd.dev/fault-reason"
FAULTS = ("fail", "crashloop", "never-ready", "succeed")

# How long the fake engine build runs after its pod is Running (a Go duration, e.g. "5s").
BUILD_DURATION_ANNOTATION = "localcluster.mmd.dev/build-duration"
DEFAULT_BUILD_DURATION_SECONDS = 2
# What the fake builder reports when the stages are written without a node pool's GPU (as on A100 nodes).
DEFAULT_BUILD_GPU_NAME = "NVIDIA A100-SXM4-80GB"
DEFAULT_BUILD_COMPUTE_CAPABILITY = "8.0"

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
# The upstream stage that would finish a Job's build pod at once, before the engine-builder stage's delay.
_STAGES_SKIPPING_BUILD_PODS = ("pod-complete",)

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
{{{{ $reason := "" }}}}
{{{{ with .metadata.annotations }}}}
{{{{ $message = index . "{FAULT_MESSAGE_ANNOTATION}" }}}}
{{{{ $exitCode = index . "{FAULT_EXIT_CODE_ANNOTATION}" }}}}
{{{{ $reason = index . "{FAULT_REASON_ANNOTATION}" }}}}
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


def _finished_template(
    *,
    phase: str,
    exit_code: str,
    reason: str,
    ready_reason: str,
    message: str,
    values: str = _FAULT_VALUES,
    container_values: str = "",
    started_at: str = "$now",
    first_transition: bool = True,
) -> str:
    """Status of a pod whose containers terminated.

    `exit_code`, `message` and `started_at` are template expressions over the variables that `values`
    (once) and `container_values` (per container, with the container as `.`) define. A pod that goes
    straight from Pending to finished (`first_transition`) also gets its IPs and start time.
    """
    return (
        values
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
{container_values}
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
      startedAt: {{{{ {started_at} | Quote }}}}
      finishedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
phase: {phase}
"""
        + (_HOST_AND_POD_IPS if first_transition else "")
    )


_FAIL_TEMPLATE = _finished_template(
    phase="Failed",
    exit_code='or $exitCode "1"',
    reason='{{ or $reason "Error" }}',
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
      reason: {{ or $reason "Error" }}
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


# Sentinels that `_build_success_format` swaps for printf verbs: the JSON line itself comes from the
# result model, so the stage can only ever report what `parse_termination_message` accepts.
_KEY_SENTINEL = "@cache-key@"
_COUNT_SENTINEL = 770_077
_SECONDS_SENTINEL = 880_088.0


def _build_success_format(gpu_name: str, compute_capability: str) -> str:
    """Return a Go printf format of the builder's success line.

    Its verbs are the cache key (%[1]s, a JSON string), the GPU count (%[2]d) and the seconds (%[3]d).
    """
    line = BuildSucceeded(
        cache_key=_KEY_SENTINEL,
        cache_hit=False,
        # What the serving image of the pinned release ships (Triton 25.05).
        versions=Versions(tensorrt_llm=versions.TRTLLM_VERSION, tensorrt="10.10.0.31", cuda="12.9.0.043"),
        gpu=Gpu(name=gpu_name, compute_capability=compute_capability, count=_COUNT_SENTINEL),
        total_bytes=14_000_000_000,
        sizes={"encoder": 500_000_000, "llm": 13_500_000_000},
        seconds=_SECONDS_SENTINEL,
    ).model_dump_json()
    if "`" in line:  # the format becomes a Go raw string literal
        raise ValueError(f"a backquote in the builder's success line: {line}")
    line = line.replace("%", "%%")
    # Explicit argument indexes: the verbs follow the arguments' order, not the line's field order.
    for sentinel, verb in (
        (f'"{_KEY_SENTINEL}"', "%[1]s"),
        (f'"count":{_COUNT_SENTINEL}', '"count":%[2]d'),
        (f'"seconds":{_SECONDS_SENTINEL}', '"seconds":%[3]d.0'),
    ):
        if line.count(sentinel) != 1:
            raise ValueError(f"{sentinel} is not once in the builder's success line: {line}")
        line = line.replace(sentinel, verb)
    return line


def _builder_template(gpu_name: str, compute_capability: str) -> str:
    # Seconds since kwok's pod-ready stage set startTime: the build's run time, as the builder measures.
    values = f"""
{{{{ $now := Now }}}}
{{{{ $cacheKey := index .metadata.labels "{labels.CACHE_KEY}" }}}}
{{{{ $started := or .status.startTime $now }}}}
{{{{ $seconds := max 0 (sub (now | unixEpoch) (toDate "2006-01-02T15:04:05Z07:00" $started | unixEpoch)) }}}}
"""
    line = _build_success_format(gpu_name, compute_capability)
    # Limits are quantity strings in the stored pod ("2"); a container without one still has a GPU.
    container_values = f"""
{{{{ $gpus := 1 }}}}
{{{{ with .resources }}}}{{{{ with .limits }}}}{{{{ with index . "nvidia.com/gpu" }}}}
{{{{ $gpus = atoi . }}}}
{{{{ end }}}}{{{{ end }}}}{{{{ end }}}}
{{{{ $message := printf `{line}` ($cacheKey | toJson) $gpus $seconds }}}}
"""
    return _finished_template(
        phase="Succeeded",
        exit_code="0",
        reason="Completed",
        ready_reason="PodCompleted",
        message="$message",
        values=values,
        container_values=container_values,
        started_at="$started",
        first_transition=False,
    )


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


def _is_build_pod_cel() -> str:
    return (
        "has(self.metadata.labels) && "
        f"'{labels.COMPONENT}' in self.metadata.labels && "
        f"self.metadata.labels['{labels.COMPONENT}'] == '{labels.ENGINE_BUILD}' && "
        f"'{labels.CACHE_KEY}' in self.metadata.labels"
    )


def _download_success_format() -> str:
    """A Go printf format of the download's success line.

    Its verbs are the key, repo, revision, commit and snapshot key (%[1]s to %[5]s, JSON strings) and the
    seconds (%[6]d).
    """
    sentinels = {name: f"@{name}@" for name in ("key", "repo", "revision", "commit", "snapshot_key")}
    line = DownloadSucceeded(
        **sentinels, files=12, total_bytes=7_514_000_000, seconds=_SECONDS_SENTINEL
    ).model_dump_json()
    if "`" in line or "%" in line:
        raise ValueError(f"the download's success line cannot be a Go format: {line}")
    # Explicit argument indexes: the verbs follow the arguments' order, not the line's field order.
    for index, sentinel in enumerate(sentinels.values(), start=1):
        if line.count(f'"{sentinel}"') != 1:
            raise ValueError(f"{sentinel} is not once in the download's success line: {line}")
        line = line.replace(f'"{sentinel}"', f"%[{index}]s")
    return line.replace(f'"seconds":{_SECONDS_SENTINEL}', f'"seconds":%[{len(sentinels) + 1}]d.0')


def _download_template() -> str:
    # The canonical JSON weights_key hashes: sorted keys, no spaces (repository names need no escaping).
    identity = '{"format":' + str(WEIGHTS_FORMAT_VERSION) + ',"huggingface":"%s","revision":"%s"}'
    arguments = " ".join(
        f"({value} | toJson)"
        for value in ("$plan.key", "$plan.repo", "$plan.revision", "$commit", "$snapshot")
    )
    values = f"""
{{{{ $now := Now }}}}
{{{{ $started := or .status.startTime $now }}}}
{{{{ $seconds := max 0 (sub (now | unixEpoch) (toDate "2006-01-02T15:04:05Z07:00" $started | unixEpoch)) }}}}
{{{{ $plan := fromJson (index (index .spec.containers 0).args 2) }}}}
{{{{ $commit := $plan.revision }}}}
{{{{ if not (regexMatch "^[0-9a-f]{{40}}$" $plan.revision) }}}}
{{{{ $commit = sha1sum (printf "%s@%s" $plan.repo $plan.revision) }}}}
{{{{ end }}}}
{{{{ $snapshot := trunc {WEIGHTS_KEY_LENGTH} (sha256sum (printf `{identity}` $plan.repo $commit)) }}}}
{{{{ $message := printf `{_download_success_format()}` {arguments} $seconds }}}}
"""
    return _finished_template(
        phase="Succeeded",
        exit_code="0",
        reason="Completed",
        ready_reason="PodCompleted",
        message="$message",
        values=values,
        started_at="$started",
        first_transition=False,
    )


def _is_download_pod_cel() -> str:
    # Guarded like the build pod's: CEL errors on a missing key, and kwok takes an error as no match, so
    # a bare lookup kept every pod without the label (any plain Job's) from completing.
    return (
        "has(self.metadata.labels) && "
        f"'{labels.COMPONENT}' in self.metadata.labels && "
        f"self.metadata.labels['{labels.COMPONENT}'] == '{labels.WEIGHTS_DOWNLOAD}'"
    )


def _download_stage() -> dict[str, Any]:
    selector = {
        "matchExpressions": [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": f'.metadata.labels["{FAULT_LABEL}"]', "operator": "DoesNotExist"},
            {"cel": {"expression": _is_download_pod_cel()}},
        ]
    }
    delay = {
        "durationMilliseconds": DEFAULT_BUILD_DURATION_SECONDS * 1000,
        "durationFrom": {"jq": {"expression": f'.metadata.annotations["{BUILD_DURATION_ANNOTATION}"]'}},
    }
    return _stage(
        "pod-weights-download-succeed",
        "Pod",
        selector,
        {"delay": delay, "next": {"statusTemplate": _download_template()}},
    )


def _builder_stage(gpu_name: str, compute_capability: str) -> dict[str, Any]:
    selector = {
        "matchExpressions": [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            # After kwok's pod-ready stage: a build is seen running before it ends.
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": f'.metadata.labels["{FAULT_LABEL}"]', "operator": "DoesNotExist"},
            {"cel": {"expression": _is_build_pod_cel()}},
        ]
    }
    # A missing or unparsable annotation falls back to durationMilliseconds.
    delay = {
        "durationMilliseconds": DEFAULT_BUILD_DURATION_SECONDS * 1000,
        "durationFrom": {"jq": {"expression": f'.metadata.annotations["{BUILD_DURATION_ANNOTATION}"]'}},
    }
    return _stage(
        "pod-engine-build-succeed",
        "Pod",
        selector,
        {"delay": delay, "next": {"statusTemplate": _builder_template(gpu_name, compute_capability)}},
    )


def stage_documents(
    upstream_dir: Path,
    *,
    gpu_name: str = DEFAULT_BUILD_GPU_NAME,
    compute_capability: str = DEFAULT_BUILD_COMPUTE_CAPABILITY,
) -> list[dict[str, Any]]:
    """Return every Stage: kwok's own (adjusted to skip faulty and build pods), builder, faults, volumes.

    `gpu_name` and `compute_capability` are what the fake engine builder reports (the node pool's GPU).
    """
    documents: list[dict[str, Any]] = []
    for relative in UPSTREAM_STAGE_FILES:
        stage: dict[str, Any] = yaml.safe_load((upstream_dir / relative).read_text())
        expressions: list[dict[str, Any]] = stage["spec"]["selector"]["matchExpressions"]
        if stage["metadata"]["name"] in _STAGES_SKIPPING_FAULTY_PODS:
            expressions.append({"key": f'.metadata.labels["{FAULT_LABEL}"]', "operator": "DoesNotExist"})
        if stage["metadata"]["name"] in _STAGES_SKIPPING_BUILD_PODS:
            expressions.append({"cel": {"expression": f"!({_is_build_pod_cel()})"}})
            expressions.append({"cel": {"expression": f"!({_is_download_pod_cel()})"}})
        documents.append(stage)
    documents.append(_builder_stage(gpu_name, compute_capability))
    documents.append(_download_stage())
    documents += [_fault_stage(fault) for fault in FAULTS]
    documents += _volume_stages()
    return documents


def write_kwok_config(
    path: Path,
    upstream_dir: Path,
    *,
    gpu_name: str = DEFAULT_BUILD_GPU_NAME,
    compute_capability: str = DEFAULT_BUILD_COMPUTE_CAPABILITY,
) -> None:
    """Write the multi-document kwok configuration (for `kwok --config`)."""
    documents = stage_documents(upstream_dir, gpu_name=gpu_name, compute_capability=compute_capability)
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
