"""The base every API model shares, and the field types and name patterns the models are built from.

`Schema` gives every model camelCase aliases, frozen instances, no unknown fields, attribute docstrings as
descriptions, and reads a null field as one left out. Pure: imports pydantic and the package's `cel`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from mmd_operator.api.v1alpha1.cel import cel_rule

# Names the operator derives objects from (Service names are DNS-1035 labels).
DNS_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# Names of other objects (Secrets, claims, ServiceAccounts, classes): DNS-1123 subdomains, as the API server
# requires of the objects the operator creates with them.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Keys of a Secret's data.
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# What Kubernetes' own parser accepts as a quantity (resource.ParseQuantity, which CEL's `isQuantity` calls):
# a sign, digits with a fraction (either may be empty: `Gi` and `.` parse as 0), then a binary or decimal
# suffix or an integer exponent; not the empty string. The API server checks it with `isQuantity`; offline
# validation gives cel-python, which lacks that function, one that matches this pattern (the cluster tier
# checks that both judge a list of strings alike).
QUANTITY_PATTERN = r"^(?=.)[+-]?[0-9]*(\.[0-9]*)?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
QUANTITY_HINT = (
    "write a number with an optional suffix such as 500Gi (Ki, Mi, Gi, Ti, Pi, Ei or k, M, G, T, P, E)"
)
QUANTITY_RULE = cel_rule(
    "isQuantity(string(self))",
    f'"{{self}}" is not a Kubernetes quantity; {QUANTITY_HINT}',
    fallback=f"not a Kubernetes quantity; {QUANTITY_HINT}",
)


class Schema(BaseModel):
    """The base of every API model: camelCase aliases, frozen, unknown fields refused, nulls dropped."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """A null field reads as one left out, as at the API server (its defaulting and CEL's has())."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


# A Kubernetes resource quantity (`2`, `500m`, `16Gi`), as the API server accepts it: integer or string.
# The string's syntax is checked by a CEL rule (at the API server and offline), which says it in a sentence;
# a `pattern` would answer with the regular expression. The length bound keeps the rule's estimated cost
# within the API server's budget (maps of quantities are bounded for the same reason).
QUANTITY_MAX_LENGTH = 64
Quantity = Annotated[
    int | Annotated[str, Field(max_length=QUANTITY_MAX_LENGTH)],
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "maxLength": QUANTITY_MAX_LENGTH,
            "x-kubernetes-validations": [QUANTITY_RULE],
        }
    ),
]
# Label and annotation values, and node selector terms: string to string.
StringMap = dict[str, Annotated[str, Field(max_length=63 * 1024)]]
