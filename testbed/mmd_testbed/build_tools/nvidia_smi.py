#!/usr/bin/env python3
"""`nvidia-smi` over the fake GPUs the local cluster's device plugin double gave this container.

On a GPU node the NVIDIA container toolkit shows a container the GPUs the kubelet allocated to it, and
`nvidia-smi` lists them. Here the real nodes' device plugin double (`mmd_testbed.localcluster.fakegpu`)
puts them in the container's environment instead, and this double prints them as the real tool does:

    FAKE_NVIDIA_GPUS        one `<name>,<major>.<minor>` per GPU, ';'-separated
                            (e.g. `NVIDIA H100 80GB HBM3,9.0;NVIDIA H100 80GB HBM3,9.0`)
    NVIDIA_VISIBLE_DEVICES  their IDs, comma-separated (GPU-<uuid>), in the same order

Without FAKE_NVIDIA_GPUS (a container given no GPU, a machine without one) it prints `No devices were
found` and exits 6, as the real one does. What it answers: `--query-gpu=<fields>` with any of `index`,
`name`, `compute_cap`, `uuid`, `count`, and `--format=csv[,noheader][,nounits]`; `-L`/`--list-gpus`.

The CPU stand-ins of the builder and serving images have it on PATH as `nvidia-smi` (the builder's through
`toolbox`, the serving ones as `python3 -m mmd_testbed.build_tools.nvidia_smi`). Standard library only: it
runs under whatever `python3` is first on PATH.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

FAKE_GPUS_ENV = "FAKE_NVIDIA_GPUS"
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
# nvidia-smi's exit codes: NVML found no GPU (NVML_ERROR_NOT_FOUND), and a bad argument.
EXIT_NO_DEVICES = 6
EXIT_BAD_ARGUMENT = 2
QUERY_FIELDS = ("index", "name", "compute_cap", "uuid", "count")


@dataclass(frozen=True)
class Gpu:
    """One GPU the container sees."""

    index: int
    name: str
    compute_cap: str
    uuid: str


def visible_gpus(environment: Mapping[str, str]) -> list[Gpu]:
    """The GPUs `environment` gives the container (none without FAKE_NVIDIA_GPUS)."""
    entries = [entry for entry in environment.get(FAKE_GPUS_ENV, "").split(";") if entry.strip()]
    ids = [value for value in environment.get(VISIBLE_DEVICES_ENV, "").split(",") if value.strip()]
    gpus = []
    for index, entry in enumerate(entries):
        name, _, compute_cap = entry.rpartition(",")
        uuid = ids[index] if index < len(ids) else f"GPU-00000000-0000-0000-0000-{index:012d}"
        gpus.append(Gpu(index, name.strip(), compute_cap.strip(), uuid.strip()))
    return gpus


def query(gpus: Sequence[Gpu], fields: Sequence[str], csv_format: Sequence[str]) -> list[str]:
    """The lines of `--query-gpu=<fields> --format=csv<options>` (header unless `noheader`)."""
    rows = [
        ", ".join(str(len(gpus)) if field == "count" else str(getattr(gpu, field)) for field in fields)
        for gpu in gpus
    ]
    return rows if "noheader" in csv_format else [", ".join(fields), *rows]


def run(argv: Sequence[str], environment: Mapping[str, str]) -> tuple[int, list[str]]:
    """Exit code and printed lines of `nvidia-smi argv` in `environment`."""
    gpus = visible_gpus(environment)
    if not gpus:
        return EXIT_NO_DEVICES, ["No devices were found"]
    options = {name: value for name, _, value in (argument.partition("=") for argument in argv)}
    if set(options) <= {"-L", "--list-gpus"} and options:
        return 0, [f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})" for gpu in gpus]
    if set(options) == {"--query-gpu", "--format"}:
        fields = [field.strip() for field in options["--query-gpu"].split(",")]
        for field in fields:
            if field not in QUERY_FIELDS:
                return EXIT_BAD_ARGUMENT, [f'Field "{field}" is not a valid field to query.']
        csv_format = options["--format"].split(",")
        if csv_format[0] != "csv" or not set(csv_format[1:]) <= {"noheader", "nounits"}:
            return EXIT_BAD_ARGUMENT, [f'"{options["--format"]}" is not a valid format.']
        return 0, query(gpus, fields, csv_format)
    return EXIT_BAD_ARGUMENT, [f"nvidia-smi double: unsupported arguments {list(argv)}"]


def main() -> None:
    """Print what the real tool would, and exit with its code."""
    code, lines = run(sys.argv[1:], os.environ)
    for line in lines:
        print(line)
    sys.exit(code)


if __name__ == "__main__":
    main()
