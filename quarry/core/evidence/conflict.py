"""The conflict rule: two statements attach different values of compatible units to the
same subject (:func:`.subjects.same_subject`), and they do not name disjoint entities.
The resolver's notion of a conflict and the evidence graph's statement links."""

from __future__ import annotations

import math
from collections.abc import Callable

from quarry.core.evidence.statement import Statement
from quarry.core.evidence.subjects import DEFAULT_THRESHOLDS, Thresholds, same_subject

__all__ = ["conflict", "conflicts", "same_value"]

# Calendar units are approximate (a month is 28-31 days): values within 2% are one value.
_CALENDAR_TOLERANCE = 0.02


def same_value(a: Statement, b: Statement) -> bool:
    """One value, whatever its notation: equal magnitudes (calendar spans within 2%), or one
    converted into another unit and rounded as written ("10 mph" and "16 km/h")."""
    if a.magnitude is None or b.magnitude is None:
        return a.value == b.value
    calendar = any(w in s.value for s in (a, b) for w in ("month", "year", "week"))
    tol = _CALENDAR_TOLERANCE if calendar else 1e-6
    return math.isclose(a.magnitude, b.magnitude, rel_tol=tol, abs_tol=1e-9) or _rounded_alike(a, b)


def _written(s: Statement) -> tuple[float, str, float] | None:
    """(number as written, unit name, half a unit of its last written digit) of a value
    such as "13.8 bar", or None for one not written as a number and a unit name."""
    number, _, unit = s.value.partition(" ")
    try:
        x = float(number)
    except ValueError:
        return None
    decimals = len(number.partition(".")[2])
    return x, unit, 0.5 * 10.0 ** -decimals


def _rounded_alike(a: Statement, b: Statement) -> bool:
    """One value converted into another unit and rounded as written: "10 mph" and "16 km/h",
    "200 psi" and "13.8 bar" (a value in the same unit name must be equal)."""
    if a.unit.split("/")[0] in ("duration", "time_of_day"):
        return False  # calendar spans have their own tolerance: "4 weeks" is no rounding of "1 month"
    wa, wb = _written(a), _written(b)
    if wa is None or wb is None or wa[1] == wb[1] or not wa[0] or not wb[0]:
        return False
    # the finer unit's rounding decides ("1 g" is no rounding of "500 mg")
    (x, _, half), s = min(((wa, a), (wb, b)), key=lambda side: abs(side[1].magnitude / side[0][0]))
    return abs(a.magnitude - b.magnitude) <= half * abs(s.magnitude / x)


def _unsaid_ok(per: list[str]) -> bool:
    """Whether a rate per ``per`` may be left unsaid on the other side: per a count ("per
    tenant"), not per a period or a measured quantity."""
    if per == ["duration"]:
        return False
    from quarry.core.evidence.quantities import names_measure  # pint loads on first use, not at import

    return not (per and names_measure(per[0]))


def _compatible(a: Statement, b: Statement) -> bool:
    if a.unit == b.unit:
        return True
    ca, cb = a.unit.split("/", 1), b.unit.split("/", 1)
    # "EUR 50,000 per tenant" and "EUR 20,000" (the rate left unsaid) compare; a time rate
    # must be on both sides (its magnitude is per day), and so must a price per a measured
    # quantity ("GBP 0.40 per kWh" is no flat charge of GBP 15)
    rate_ok = ca[1:] == cb[1:] or (not ca[1:] and _unsaid_ok(cb[1:])) or (not cb[1:] and _unsaid_ok(ca[1:]))
    if ca[0] == cb[0]:
        return rate_ok
    # EUR 15 vs USD 15 for the same subject: amounts in different currencies conflict.
    return ca[0].startswith("currency:") and cb[0].startswith("currency:") and rate_ok


def conflicts(a: Statement, b: Statement, similarity: Callable[[str, str], float] | None = None,
              thresholds: Thresholds = DEFAULT_THRESHOLDS) -> bool:
    """``a`` and ``b`` attach different values of compatible units to the same subject,
    and they do not name disjoint entities."""
    if not _compatible(a, b) or not same_subject(a, b, similarity, thresholds):
        return False
    if a.scope and b.scope and not set(a.scope) & set(b.scope) and not (
            set(a.scope) & set(b.context) or set(b.scope) & set(a.context)):
        return False  # disjoint entities, neither mentioned by the other side
    if a.unit.split("/")[0] != b.unit.split("/")[0]:
        # another currency; but a scoped amount in another currency than a general one is
        # the local equivalent ("EUR 5,800 in Porto" for "GBP 5,000")
        return set(a.scope) == set(b.scope)
    return not same_value(a, b)


def conflict(a: tuple[Statement, ...], b: tuple[Statement, ...],
             similarity: Callable[[str, str], float] | None = None,
             thresholds: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Statement, Statement] | None:
    """The first pair (in text order) where ``a`` and ``b`` attach different values to the
    same subject, or None."""
    for sa in a:
        for sb in b:
            if conflicts(sa, sb, similarity, thresholds):
                return sa, sb
    return None
