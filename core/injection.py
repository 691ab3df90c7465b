"""Instruction-shaped text: a passage that tells its reader to disregard evidence."""

from __future__ import annotations

import re

_PATTERN = re.compile(r"\b(?:ignore|disregard|override)\b[^.]{0,40}\b(?:policy|instructions?|rules?|above)\b",
                      re.IGNORECASE)


def instruction_shaped(text: str) -> bool:
    return bool(_PATTERN.search(text))
