"""The :class:`Statement` record: one value attached to a subject, as one sentence states
it. Extracted by :mod:`.statements` (values) and :mod:`.predicates` (owner, status and
date facts), compared by :mod:`.subjects` and :mod:`.conflict`, stored as JSON in each
shard's ``evidence.jsonl``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Statement"]


@dataclass(frozen=True)
class Statement:
    """One value attached to a subject, as stated in one sentence."""

    subject: tuple[str, ...]  # content lemmas of the subject phrase, e.g. ("password",)
    predicate: str  # normalised lemma of what is stated: "expire", "cutoff", "cost"
    value: str  # canonical value: "15:00", "90 day", "EUR 40", "5%"
    unit: str  # compatibility key: "time_of_day", "duration", "currency:EUR", "percent", "count:seat"
    magnitude: float | None  # the value in the unit's base (days, minutes since midnight, ...)
    scope: tuple[str, ...] = ()  # entities the sentence names (lowercase)
    words: tuple[str, ...] = ()  # the clause's words as written, for a follow-up query
    context: tuple[str, ...] = ()  # content lemmas of the value's part of the sentence (value and scope left out)
    clause: str = ""  # the sentence with its values masked as "#", for an embedder's similarity
    qualifiers: tuple[str, ...] = ()  # names and labels in the value's part: "leeds", "line 3", "harbour"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | dict[str, Any]) -> Statement:
        d = json.loads(data) if isinstance(data, str) else dict(data)
        try:
            return cls(subject=tuple(d["subject"]), predicate=str(d["predicate"]), value=str(d["value"]),
                       unit=str(d["unit"]), magnitude=None if d.get("magnitude") is None else float(d["magnitude"]),
                       scope=tuple(d.get("scope", ())), words=tuple(d.get("words", ())),
                       context=tuple(d.get("context", ())), clause=str(d.get("clause", "")),
                       qualifiers=tuple(d.get("qualifiers", ())))
        except KeyError as e:
            raise ValueError(f"a Statement needs subject, predicate, value and unit; missing {e}") from None
