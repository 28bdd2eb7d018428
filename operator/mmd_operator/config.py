"""The operator's own settings: defaults for what a resource leaves out, and how the operator runs.

One frozen value, read once at start-up from the environment (`MMD_*` variables, which the Helm chart
and the operator image set) and passed down explicitly; nothing reads it as a global. Pure: imports
only the pinned versions, the runtime names and the API's quantity hint.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from engine_builder import versions
from mmd_operator.api.v1alpha1 import QUANTITY_HINT
from mmd_operator.api.validation import spec_runtime
from mmd_operator.knowledge import Runtime

DEFAULT_CLAIM = "mmd-engine-cache"
# What the settings below accept, checked here at start-up and by the chart's values schema at `helm
# install` (tools/chart.py), so that a value the operator cannot use is refused before it runs.
# A kubelet renews its node's Lease every 10 s: below 15 s a live node would be taken for a lost one.
MIN_LOST_NODE_SECONDS = 15
# The size of a claim the operator creates: a positive Kubernetes quantity of bytes (`200Gi`, `1.5T`);
# `500GB` is none (Kubernetes writes G or Gi).
CLAIM_SIZE_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
# An endpoint the operator or its Jobs talk to: an http(s) URL with a host, or empty (none).
ENDPOINT_PATTERN = r"^(https?://[^\s/?#]+([/?#]\S*)?)?$"


class ConfigError(ValueError):
    """A setting has a value the operator cannot use."""


@dataclass(frozen=True)
class OperatorConfig:
    """Operator-wide defaults and run settings."""

    # Engine cache claims the operator creates, unless a resource says otherwise.
    engine_cache_claim: str = DEFAULT_CLAIM
    engine_cache_size: str = "200Gi"
    engine_cache_storage_class: str | None = None
    engine_cache_access_mode: str = "ReadWriteMany"
    # Images of the build Jobs and the serving pods where a resource names none (a registry mirror, say).
    builder_image: str = versions.BUILDER_IMAGE
    serving_image: str = versions.SERVING_IMAGE
    # The trtllm-serve runtime's serving image where a resource names none.
    trtllm_serve_image: str = versions.TRTLLM_SERVE_IMAGE
    # The Hugging Face Hub the weights download Jobs talk to (HF_ENDPOINT: a mirror); empty: the public Hub.
    hf_endpoint: str = ""
    # Where the serving image keeps the Triton Python model code.
    model_code_path: str = versions.MODEL_CODE_DIR
    # Server-side apply field manager and the HTTP user agent of every request the operator makes.
    field_manager: str = "mmd-operator"
    # How often every resource is looked at again even without an event (nothing is written unless
    # something changed), and how long to wait before looking again at something that may fix itself.
    resync_seconds: float = 600.0
    retry_seconds: float = 30.0
    # Resources reconciled at once.
    workers: int = 8
    # Namespaces to watch; empty means all.
    namespaces: tuple[str, ...] = ()
    metrics_port: int = 8080
    health_port: int = 8081
    log_level: str = "INFO"
    log_format: str = "text"
    # List the nodes (cluster-wide) while a pod cannot be scheduled, to name their GPUs in the message.
    read_nodes: bool = True
    # Leader election on a Lease (the chart turns it on): one process reconciles, the others stand by
    # and take over when its lease has not been renewed for `lease_duration_seconds`.
    leader_election: bool = False
    lease_name: str = "mmd-operator"
    # Empty: the namespace the operator runs in (its pod's; from a checkout, the kubeconfig context's).
    lease_namespace: str = ""
    lease_duration_seconds: int = 15
    lease_renew_deadline_seconds: float = 10.0
    lease_retry_seconds: float = 2.0
    # The operator's pod (the chart sets it from the downward API): the stem of its election identity.
    pod_name: str = ""
    # The Prometheus a Canary rollout's analysis asks (http://prometheus.monitoring:9090, say); empty:
    # a canary is judged on readiness alone, and its status says so.
    prometheus_url: str = ""
    # Mark the serving pods of a node whose Lease has not been renewed for this long not ready, so their
    # Service stops sending to a dead node long before the node controller does; 0 turns it off.
    lost_node_seconds: float = 20.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorConfig:
        """Settings from `MMD_<FIELD NAME>` variables (`MMD_WORKERS=16`, `MMD_NAMESPACES=a,b`).

        Raises:
            ConfigError: naming the variable whose value cannot be used.
        """
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for spec in fields(cls):
            variable = f"MMD_{spec.name.upper()}"
            raw = env.get(variable)
            if raw is None or raw == "":
                continue
            default = getattr(cls(), spec.name)
            try:
                if isinstance(default, bool):
                    values[spec.name] = raw.lower() in ("1", "true", "yes")
                elif isinstance(default, int):
                    values[spec.name] = int(raw)
                elif isinstance(default, float):
                    values[spec.name] = float(raw)
                elif isinstance(default, tuple):
                    values[spec.name] = tuple(part.strip() for part in raw.split(",") if part.strip())
                else:
                    values[spec.name] = raw
            except ValueError:
                raise ConfigError(f"{variable}={raw!r} is not a valid {type(default).__name__}") from None
        return cls().with_changes(**values)

    def with_spec_defaults(self, spec: object) -> object:
        """`spec` with the operator's default images where it names none, for planning.

        Only an image set away from the pinned default is filled in, so with the defaults a spec (and
        the cacheKey derived from it) is exactly what the user wrote. The images set are the default
        engine-path release's; another release's are the same names tagged for it (`_for_release`).
        """
        if not isinstance(spec, Mapping):
            return spec
        filled = dict(spec)
        images = {
            Runtime.TRITON_TRTLLM_ENGINE: (
                ("engine", "builderImage", self.builder_image, versions.BUILDER_IMAGE),
                ("serving", "image", self.serving_image, versions.SERVING_IMAGE),
            ),
            # trtllm-serve has no build image in its spec (the download Job runs the operator's builder).
            Runtime.TRTLLM_SERVE: (
                ("serving", "image", self.trtllm_serve_image, versions.TRTLLM_SERVE_IMAGE),
            ),
        }
        release = _engine_release(spec)
        for section, key, image, pinned in images[spec_runtime(spec)]:
            given = filled.get(section)
            if image != pinned and (given is None or isinstance(given, Mapping)):
                released = _for_release(image, release)
                if released is not None:
                    filled[section] = {key: released, **(given or {})}
        return filled

    def with_changes(self, **changes: object) -> OperatorConfig:
        """A copy with `changes`, checked.

        Raises:
            ConfigError: when a value is out of range.
        """
        config = replace(self, **changes)  # type: ignore[arg-type]
        if config.workers < 1:
            raise ConfigError("workers must be at least 1")
        if config.resync_seconds < 1 or config.retry_seconds < 1:
            raise ConfigError("resync_seconds and retry_seconds must be at least 1")
        if config.engine_cache_access_mode not in ("ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"):
            raise ConfigError(
                f"engine_cache_access_mode {config.engine_cache_access_mode!r} is not an access mode"
            )
        if config.lost_node_seconds and config.lost_node_seconds < MIN_LOST_NODE_SECONDS:
            raise ConfigError(
                f"lost_node_seconds must be 0 (off) or at least {MIN_LOST_NODE_SECONDS}: a kubelet renews "
                f"its Lease every 10 s; got {config.lost_node_seconds:g}"
            )
        if not re.fullmatch(CLAIM_SIZE_PATTERN, config.engine_cache_size):
            raise ConfigError(
                f"engine_cache_size {config.engine_cache_size!r} is not a Kubernetes quantity of bytes; "
                f"{QUANTITY_HINT}"
            )
        for name in ("hf_endpoint", "prometheus_url"):
            if not re.fullmatch(ENDPOINT_PATTERN, getattr(config, name)):
                raise ConfigError(
                    f"{name} {getattr(config, name)!r} is not an http:// or https:// URL with a host"
                )
        if config.log_format not in ("text", "json"):
            raise ConfigError("log_format must be text or json")
        if not (
            0
            < config.lease_retry_seconds
            < config.lease_renew_deadline_seconds
            < config.lease_duration_seconds
        ):
            raise ConfigError(
                "leader election needs lease_retry_seconds < lease_renew_deadline_seconds < "
                f"lease_duration_seconds (a leader stops before anyone may take over); got "
                f"{config.lease_retry_seconds:g} < {config.lease_renew_deadline_seconds:g} < "
                f"{config.lease_duration_seconds}"
            )
        return config


def _engine_release(spec: Mapping[str, object]) -> str:
    engine = spec.get("engine")
    version = engine.get("tensorrtLlmVersion") if isinstance(engine, Mapping) else None
    return version if isinstance(version, str) else versions.TRTLLM_VERSION


def _for_release(image: str, release: str) -> str | None:
    """`image`, set for the default engine-path release, as the image of `release`.

    `make images` and the test bed tag each release's images `<version>-trtllm<release>`: an image tagged
    so for the default release gives the name of the other's. Any other image (a digest, a tag of one's
    own) says nothing of another release: None, and the release's own default applies unless the
    resource names one.
    """
    if release == versions.TRTLLM_VERSION:
        return image
    default_suffix = f"-trtllm{versions.TRTLLM_VERSION}"
    if image.endswith(default_suffix):
        return image.removesuffix(default_suffix) + f"-trtllm{release}"
    return None
