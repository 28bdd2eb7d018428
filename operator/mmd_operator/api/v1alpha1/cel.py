"""CEL for `x-kubernetes-validations`: rule entries whose messages name the values they compared.

`cel_rule` builds one entry from a CEL expression and a message that names values as `{CEL expression}`;
`cel_list` writes a CEL list literal. Pure: imports only `re` and pydantic's JSON types, none of the
package's modules.
"""

from __future__ import annotations

import re

from pydantic.config import JsonDict

# How the API server (v1.34, tried on the local control plane) prints a rule that fails: `reason` picks the
# kind of field error, `fieldPath` the path it is reported at (relative to the node the rule sits on), and
# `messageExpression` the words (the static `message` when the expression fails to evaluate):
#   no reason, or FieldValueInvalid:  spec.engine.maxSeqLen: Invalid value: "object": <message>
#   FieldValueForbidden:              spec.engine.maxSeqLen: Forbidden: <message>
#   FieldValueRequired:               spec.model.variant: Required value: <message>
# "Invalid value" shows the schema type of the node the rule sits on ("object"), never the field's value.
# So every rule here is Forbidden (a value that is not allowed where it is) or Required (a field that must
# be set), and names the values in its own message. The values are written with `format` ('%s' renders
# integers, numbers, booleans and strings): concatenating `string(self.x)` is refused when the CRD is
# created, because the cost estimator cannot bound the length of a number turned into a string.
FORBIDDEN = "FieldValueForbidden"
REQUIRED = "FieldValueRequired"

# `{CEL expression}` in a rule's message: a value the message names.
_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")
_MARK = "\0"


def cel_list(values: list[str]) -> str:
    """Render `values` as a CEL list literal."""
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _message_expression(message: str) -> str | None:
    """The CEL expression that writes `message` with its `{...}` values filled in; None without values."""
    parts = _PLACEHOLDER.split(message)
    if len(parts) == 1:
        return None
    # Even parts are text, odd parts CEL expressions.
    text = "".join("%s" if index % 2 else part.replace("%", "%%") for index, part in enumerate(parts))
    return f"{_cel_string(text)}.format([{', '.join(parts[1::2])}])"


def _static_message(message: str) -> str:
    """`message` without the values it names (what the API server shows if the expression fails).

    A parenthesised part or a last `; ...` clause that names a value is left out.
    """
    marked = _PLACEHOLDER.sub(_MARK, message)
    marked = re.sub(rf" ?\([^()]*{_MARK}[^()]*\)", "", marked)
    marked = re.sub(rf";[^;]*{_MARK}[^;]*$", "", marked)
    if _MARK in marked:
        raise ValueError(f"a value outside parentheses or a last '; ...' clause: {message!r}")
    return marked


def cel_rule(
    rule: str,
    message: str,
    *,
    field_path: str | None = None,
    reason: str = FORBIDDEN,
    fallback: str | None = None,
) -> JsonDict:
    """One `x-kubernetes-validations` entry.

    `message` may name values as `{CEL expression}` (evaluated on the node the rule sits on): they become
    the rule's `messageExpression`, and the static `message` leaves them out (or is `fallback`).
    `field_path` is relative to that node.
    """
    entry: JsonDict = {"rule": rule, "message": fallback or _static_message(message)}
    expression = _message_expression(message)
    if expression is not None:
        entry["messageExpression"] = expression
    entry["reason"] = reason
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry
