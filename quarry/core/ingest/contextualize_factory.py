"""The contextualizer a build's settings name (``extractive``, ``llm`` or ``none``)."""

from __future__ import annotations

from pydantic import SecretStr

from quarry.core.ingest.contextualize import KINDS, LLMSettings, NoContextualizer
from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
from quarry.core.ingest.contextualize_llm import LLMContextualizer

__all__ = ["make_contextualizer"]


def make_contextualizer(
    kind: str = "extractive",
    llm: LLMSettings | None = None,
    api_key: SecretStr | str | None = None,
) -> ExtractiveContextualizer | LLMContextualizer | NoContextualizer:
    if kind == "extractive":
        return ExtractiveContextualizer()
    if kind == "none":
        return NoContextualizer()
    if kind == "llm":
        if llm is None:
            raise ValueError("contextualize kind 'llm' needs LLM settings (base_url, model, ...)")
        return LLMContextualizer(llm, api_key=api_key)
    raise ValueError(f"unknown contextualize kind {kind!r}; allowed: {', '.join(KINDS)}")
