"""`docs/configuration.md`, generated: every operator setting, where the chart and the command line set it.

Every operator setting (`config.OperatorConfig`) with the chart value that sets it (read from the
deployment template's `MMD_*` variables) and its command-line flag, then every other chart value, with
the descriptions of the chart's values model (`tools.chart`). `make generate` writes it; a test fails when
it drifts. Imports the chart's values model, the settings and the operator's command line.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import fields
from typing import Any

from pydantic import BaseModel

from mmd_operator import main as operator_main
from mmd_operator.config import OperatorConfig
from tools.chart import CHART_DIR, Values

CONFIGURATION_DOC = "docs/configuration.md"
DEPLOYMENT_TEMPLATE = f"{CHART_DIR}/templates/deployment.yaml"

# What the settings the chart leaves at their defaults are for; the others say it in their chart value.
_UNCHARTED_SETTINGS = {
    "field_manager": "Server-side apply field manager, and the user agent of every request the operator "
    "makes.",
    "model_code_path": "Where the serving image keeps the Triton Python model code (a tensorrtllm_backend "
    "`all_models` tree), which the serving pods' init container copies into the model repository.",
    "pod_name": "The operator's pod, the stem of its identity in the leader election (a random suffix "
    "follows, so a restarted container is a new candidate), which is also in the user agent of the "
    "operator's own requests, so the audit log tells the replicas apart. Empty: the host name.",
}
# Command-line options not named like the setting they change (`main.config_from`).
_OPTION_SETTINGS = {"namespace": "namespaces"}
_TEMPLATE_ENV = re.compile(r"- name: (MMD_[A-Z_]+)\s+value: \{\{[^}]*?\.Values\.([A-Za-z0-9_.]+)")
_POD_FIELD_ENV = re.compile(r"- name: (MMD_[A-Z_]+)\s+valueFrom:\s+fieldRef:\s+fieldPath: ([A-Za-z.]+)")


def pod_field_settings(deployment_template: str) -> dict[str, str]:
    """The operator settings the deployment template sets from the pod's own fields (the downward API)."""
    return {
        variable.removeprefix("MMD_").lower(): field
        for variable, field in _POD_FIELD_ENV.findall(deployment_template)
    }


def chart_settings(deployment_template: str) -> dict[str, str]:
    """The chart value behind each operator setting the deployment template sets, by setting name.

    Raises:
        ValueError: when the template sets a variable that is no operator setting.
    """
    names = {spec.name for spec in fields(OperatorConfig)}
    settings: dict[str, str] = {}
    for variable, value in _TEMPLATE_ENV.findall(deployment_template):
        setting = variable.removeprefix("MMD_").lower()
        if setting not in names:
            raise ValueError(f"{DEPLOYMENT_TEMPLATE} sets {variable}, which is no operator setting")
        settings[setting] = value
    return settings


def _options() -> dict[str, str]:
    """The command-line option of each setting that has one (`python -m mmd_operator`)."""
    parser = argparse.ArgumentParser(add_help=False)
    operator_main.add_arguments(parser)
    names = {spec.name for spec in fields(OperatorConfig)}
    options: dict[str, str] = {}
    for action in parser._actions:
        setting = _OPTION_SETTINGS.get(action.dest, action.dest)
        if setting not in names:
            raise ValueError(f"the operator's option {action.option_strings} changes no setting")
        options[setting] = ", ".join(f"`{option}`" for option in action.option_strings)
    return options


def _chart_values(model: BaseModel, prefix: str = "") -> dict[str, tuple[Any, str]]:
    """Every leaf of the chart's values by dotted key: (default, description)."""
    values: dict[str, tuple[Any, str]] = {}
    for name, field in type(model).model_fields.items():
        key = f"{prefix}{field.alias or name}"
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            values.update(_chart_values(value, f"{key}."))
        else:
            values[key] = (value, " ".join((field.description or "").split()))
    return values


def _setting_default(value: object) -> str:
    if value is None or (isinstance(value, (str, tuple, list)) and not value):
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def _setting_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean (true or false)"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, tuple):
        return "list, comma-separated"
    return "string"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def configuration_doc(deployment_template: str) -> str:
    """`docs/configuration.md`: every operator setting, where the chart and the command line set it.

    Raises:
        ValueError: when a setting is described nowhere, or the template or an option names no setting.
    """
    charted = chart_settings(deployment_template)
    from_pod = pod_field_settings(deployment_template)
    options = _options()
    values = _chart_values(Values())
    defaults = OperatorConfig()
    undescribed = [
        spec.name for spec in fields(OperatorConfig) if spec.name not in charted | _UNCHARTED_SETTINGS
    ]
    if undescribed or set(_UNCHARTED_SETTINGS) & set(charted):
        raise ValueError(
            f"describe each operator setting once, by a chart value or in _UNCHARTED_SETTINGS: {undescribed}"
        )
    unknown = sorted(value for value in charted.values() if value not in values)
    if unknown:
        raise ValueError(f"{DEPLOYMENT_TEMPLATE} reads values the chart does not have: {unknown}")
    settings = [
        "| variable | chart value | option | type | default | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for spec in fields(OperatorConfig):
        default = getattr(defaults, spec.name)
        value = charted.get(spec.name)
        about = values[value][1] if value is not None else _UNCHARTED_SETTINGS[spec.name]
        where = f"`{value}`" if value else "not set"
        if spec.name in from_pod:
            where = f"the pod's `{from_pod[spec.name]}`"
        shown = _setting_default(default)
        if value is not None and _setting_default(values[value][0]) != shown:
            # The chart sets the variable from a value whose own default differs: say both.
            shown += f"; the chart: {_setting_default(values[value][0])}"
        settings.append(
            f"| `MMD_{spec.name.upper()}` | {where} "
            f"| {options.get(spec.name, '')} | {_setting_type(default)} | {shown} "
            f"| {_cell(about)} |"
        )
    others = ["| chart value | default | what it does |", "|---|---|---|"]
    for key, (default, about) in values.items():
        if key not in charted.values():
            others.append(f"| `{key}` | `{json.dumps(default)}` | {_cell(about)} |")
    intro = f"""\
# Configuration

<!-- Generated by `make generate` from the settings (operator/mmd_operator/config.py), the chart's
values model (tools/chart.py), {DEPLOYMENT_TEMPLATE} and the operator's
command line (operator/mmd_operator/main.py); do not edit. -->

The operator reads its settings once, at start-up, from `MMD_*` environment variables: one per field of
`OperatorConfig` in `operator/mmd_operator/config.py`, named `MMD_<FIELD NAME>`. A list is
comma-separated (`MMD_NAMESPACES=ml,vision`); an unset or empty variable keeps the default. A value the
operator cannot use stops it at start-up with a message naming the variable (exit code 2).

The Helm chart sets each variable from the chart value beside it, whose default is the setting's unless
the default column says what the chart's is; a setting the chart does not set keeps its default in the
chart's pod too. `python -m mmd_operator` also takes the
command-line options beside it, which win over the environment.

The images, the model code path and the engine-cache settings are defaults for resources that say
nothing: a resource's own `spec.engine.builderImage`, `spec.serving.image`, `spec.serving.modelCodePath`
and `spec.engineCache` win. The builder image is part of the cacheKey, so another default builder image
means new engines for the resources that use it.

## Operator settings

"""
    rest = """
## The chart's other values

They shape the operator's pod and what the chart installs around it. `values.yaml` carries the same
descriptions and `values.schema.json` refuses at `helm install` a misspelt or mistyped value, and one the
operator could not use (the same rules as its own start-up checks).

"""
    return intro + "\n".join(settings) + "\n" + rest + "\n".join(others) + "\n"
