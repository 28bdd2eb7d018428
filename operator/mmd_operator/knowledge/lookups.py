"""Each runtime's knowledge table behind one face: which model types a runtime serves, and what they take.

Pure data: imports `shared`, `triton` and `trtllm_serve` of ours and does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from mmd_operator.knowledge.shared import Modality, ModelType, Runtime
from mmd_operator.knowledge.triton import KNOWLEDGE, ModelKnowledge
from mmd_operator.knowledge.trtllm_serve import SERVE_KNOWLEDGE, ServeKnowledge

# Each runtime's table, behind one face: what it serves and what requests to a type may carry.
_TABLES: Mapping[Runtime, Mapping[ModelType, ModelKnowledge | ServeKnowledge]] = MappingProxyType(
    {Runtime.TRITON_TRTLLM_ENGINE: KNOWLEDGE, Runtime.TRTLLM_SERVE: SERVE_KNOWLEDGE}
)


def types_of(runtime: Runtime) -> list[str]:
    """The model types `runtime` serves, sorted."""
    return sorted(t.value for t in _TABLES[runtime])


def types_taking(runtime: Runtime, modality: Modality) -> list[str]:
    """The model types `runtime` serves whose requests may carry `modality`, sorted."""
    return sorted(t.value for t, known in _TABLES[runtime].items() if modality in known.modalities)


def types_by_largest_world(runtime: Runtime) -> dict[int, list[str]]:
    """The model types `runtime` serves, sorted, by the largest world (tensor x pipeline ranks) offered."""
    worlds = {known.largest_world for known in _TABLES[runtime].values()}
    return {
        world: sorted(t for t, k in _TABLES[runtime].items() if k.largest_world == world) for world in worlds
    }


def pipeline_types(runtime: Runtime) -> list[str]:
    """The model types `runtime` serves with pipeline parallelism, sorted."""
    return sorted(t.value for t, known in _TABLES[runtime].items() if known.pipeline_parallel)
