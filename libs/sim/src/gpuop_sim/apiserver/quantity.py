"""Kubernetes resource quantities: parse and print in the canonical form the server stores.

The real server decodes every `resource.Quantity` and encodes it again, so what a client sent
comes back canonical (`0.5k` -> `500`, `1000` -> `1k`, `1.5Gi` -> `1536Mi`). The rules, from the
documented format (`<signedNumber><suffix>`, suffixes Ki..Ei, n..E, or `e<int>`):
- values finer than 10^-9 round up (away from zero) to nano units;
- a binary-suffixed value stays binary only when it is an integer of magnitude >= 1024, with the
  largest power of 1024 that divides it; otherwise it prints as decimal;
- a decimal value prints with its exponent lowered to a multiple of 3 and the largest suffix
  that keeps the number an integer; the `e` form keeps `e<exp>` (none when the exponent is 0).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

QUANTITY_REGEX = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_NUMBER = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)", re.DOTALL)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exp: suffix for suffix, exp in _DECIMAL.items()}
_BINARY_SUFFIX = {exp: suffix for suffix, exp in _BINARY.items()}
_NANO = Fraction(1, 10**9)


class QuantityError(ValueError):
    """The text is not a quantity; the message is the real server's decode error."""

    def __init__(self) -> None:
        super().__init__(f"quantities must match the regular expression '{QUANTITY_REGEX}'")


def parse_quantity(value: Any) -> tuple[Fraction, str]:
    """(exact value, format) with format one of BinarySI, DecimalSI, DecimalExponent."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError
    text = str(value).strip() if not isinstance(value, str) else value
    match = _NUMBER.fullmatch(text)
    if match is None:
        raise QuantityError
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in _BINARY:
        amount, fmt = number * 1024 ** _BINARY[suffix], "BinarySI"
    elif suffix in _DECIMAL:
        amount, fmt = number * Fraction(10) ** _DECIMAL[suffix], "DecimalSI"
    elif re.fullmatch(r"[eE][-+]?[0-9]+", suffix):
        amount, fmt = number * Fraction(10) ** int(suffix[1:]), "DecimalExponent"
    else:
        raise QuantityError
    return _round_to_nano(amount), fmt


def _round_to_nano(amount: Fraction) -> Fraction:
    scaled = amount / _NANO
    if scaled.denominator == 1:
        return amount
    whole = -((-abs(scaled.numerator)) // scaled.denominator)  # ceil of the magnitude
    return Fraction(whole if amount > 0 else -whole) * _NANO


def canonical_quantity(value: Any) -> str:
    amount, fmt = parse_quantity(value)
    if amount == 0:
        return "0"
    if fmt == "BinarySI" and (abs(amount) < 1024 or amount.denominator != 1):
        fmt = "DecimalSI"
    if fmt == "BinarySI":
        number, exponent = amount.numerator, 0
        while number % 1024 == 0 and exponent < 6:
            number //= 1024
            exponent += 1
        return f"{number}{_BINARY_SUFFIX.get(exponent, '')}"
    # Decimal: mantissa * 10^exponent with the mantissa an integer without trailing zeros.
    exponent = -9
    mantissa = int(amount / _NANO)
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3:
        mantissa *= 10
        exponent -= 1
    if fmt == "DecimalSI" and exponent in _DECIMAL_SUFFIX:
        return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"
    return f"{mantissa}e{exponent}" if exponent else str(mantissa)
