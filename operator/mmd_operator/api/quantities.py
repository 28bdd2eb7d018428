"""Kubernetes resource quantities (`500m`, `24Gi`, `1e3`) as exact numbers, and back into words.

`parse` reads what the API server accepts (`QUANTITY_PATTERN`: binary and decimal suffixes, exponents) as a
`Fraction`, so comparisons and sums are exact; `memory` and `cpu` write a figure the way a person and
`kubectl` write it (`24Gi`, `3500m`). `Quantity` is the value of the Kubernetes CEL library's `quantity()`
that offline validation gives cel-python (`compareTo`, `isLessThan`, `isGreaterThan`, `sign`, `add`,
`sub`). Pure: imports the standard library and the schema's pattern.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from mmd_operator.api.v1alpha1.schema import QUANTITY_PATTERN

_SUFFIXES = {
    "Ki": Fraction(1 << 10),
    "Mi": Fraction(1 << 20),
    "Gi": Fraction(1 << 30),
    "Ti": Fraction(1 << 40),
    "Pi": Fraction(1 << 50),
    "Ei": Fraction(1 << 60),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(QUANTITY_PATTERN)
_NUMBER = re.compile(r"^([+-]?[0-9]*(?:\.[0-9]*)?)(.*)$")
MIB = 1 << 20
GIB = 1 << 30


def is_quantity(text: object) -> bool:
    """Whether `text` (a string or an integer) is a quantity the API server accepts."""
    return isinstance(text, int) or (isinstance(text, str) and _QUANTITY.fullmatch(text) is not None)


def parse(text: str | int) -> Fraction:
    """The value of a quantity: `24Gi` is 25769803776, `500m` is 1/2.

    Raises:
        ValueError: when `text` is not a quantity.
    """
    if isinstance(text, int):
        return Fraction(text)
    if not is_quantity(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    found = _NUMBER.fullmatch(text)
    assert found is not None  # the pattern above matched
    number, suffix = found.groups()
    value = Fraction(number) if number.strip("+-.") else Fraction(0)
    if suffix[:1] in ("e", "E") and suffix not in _SUFFIXES:
        return value * Fraction(10) ** int(suffix[1:])
    return value * _SUFFIXES[suffix]


def memory(amount: int | Fraction) -> str:
    """Bytes as a person writes them: whole Gi or Mi when they are, else bytes (`24Gi`, `1536Mi`)."""
    whole = math.ceil(amount)
    for suffix, size in (("Gi", GIB), ("Mi", MIB)):
        if whole % size == 0 and whole:
            return f"{whole // size}{suffix}"
    return str(whole)


def cpu(amount: int | Fraction) -> str:
    """Cores as a person writes them: whole cores (`4`), else millicores (`3500m`)."""
    millis = math.ceil(amount * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def shown(name: str, amount: int | Fraction) -> str:
    """A quantity of resource `name` in words: memory-like in bytes, cpu in cores, others as a number."""
    if name.split(".")[-1] == "cpu":
        return cpu(amount)
    if isinstance(amount, Fraction) and amount.denominator != 1:
        return cpu(amount)
    if name.split(".")[-1] in ("memory", "ephemeral-storage", "storage") or name.startswith("hugepages"):
        return memory(amount)
    return str(int(amount))


@dataclass(frozen=True)
class Quantity:
    """The value of CEL's `quantity()` (the Kubernetes CEL library), for cel-python."""

    value: Fraction

    def compare(self, other: Quantity | int) -> int:
        """-1, 0 or 1 as this is below, equal to or above `other`."""
        theirs = other.value if isinstance(other, Quantity) else Fraction(other)
        return (self.value > theirs) - (self.value < theirs)
