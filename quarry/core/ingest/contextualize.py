"""Contextualization: a short derived preamble per passage (DESIGN §2, §7 step 4).

The preamble lands in ``Passage.context``. Both legs index it (it tells BM25 and the
embedder which document and section a terse chunk belongs to), but it is never
returned as evidence text: only ``Passage.text`` is cited.

Three implementations behind one protocol:

- ``extractive`` (default): title, doc type, entity scope, heading path and the
  document's lead sentence. Deterministic and free.
- ``llm``: an OpenAI-compatible ``/chat/completions`` endpoint. One request carries the
  document once plus all of its chunks (numbered) and asks for a JSON array with one
  situating sentence per chunk, so the document is paid for once per document, not once
  per chunk. Bounded concurrency, retries with exponential backoff, a cost account.
- ``none``: empty preambles.

Where each part lives: the protocol, the kinds and their settings, the cost account and
:func:`with_context` here; :mod:`.contextualize_extractive`, :mod:`.contextualize_llm`
(with its prompt and reply parsing in :mod:`.contextualize_llm_prompt`) implement the
kinds, and :func:`.contextualize_factory.make_contextualizer` builds the one a build names.

Pointing ``llm`` at a real endpoint, e.g. vLLM on the same Ray cluster::

    # an OpenAI-compatible server; prefix caching makes the repeated document prefix
    # (long documents split into several requests, parse retries) nearly free
    vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000 --enable-prefix-caching
    # or Ray Serve LLM (ray.serve.llm.build_openai_app), which serves the same /v1 API

    contextualize:
      kind: llm
      llm:
        base_url: http://<ray-head-or-service>:8000/v1   # everything before /chat/completions
        model: Qwen/Qwen2.5-7B-Instruct                   # the served model name
        api_key_env: QUARRY_LLM_API_KEY                   # the edge reads it; core never does
        max_concurrency: 8
        price_in_per_1k: 0.0                              # your currency per 1k tokens
        price_out_per_1k: 0.0

The caller (the job's edge code) resolves ``api_key_env`` and passes the key as
``api_key``; core code never reads environment variables. Document text is never
logged: only document ids.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from quarry.core.records import Passage, SourceDocument

__all__ = ["KINDS", "ContextKind", "Contextualizer", "CostAccount", "LLMSettings", "NoContextualizer",
           "check_same_doc", "with_context"]

ContextKind = Literal["extractive", "llm", "none"]
KINDS: tuple[str, ...] = ("extractive", "llm", "none")


@runtime_checkable
class Contextualizer(Protocol):
    name: str

    def contextualize(self, doc: SourceDocument, passages: Sequence[Passage]) -> list[str]:
        """One preamble per passage, in the passages' order."""
        ...


def with_context(passages: Sequence[Passage], preambles: Sequence[str]) -> list[Passage]:
    """New passages with ``context`` set; ``text`` (the evidence) is untouched."""
    if len(passages) != len(preambles):
        raise ValueError(f"{len(passages)} passages but {len(preambles)} preambles")
    return [p.model_copy(update={"context": c}) for p, c in zip(passages, preambles)]


def check_same_doc(doc: SourceDocument, passages: Sequence[Passage]) -> None:
    """Refuse passages of another document (or version): a preamble built from the wrong
    document would be indexed as if it were true."""
    for p in passages:
        if p.envelope.doc_id != doc.doc_id or p.envelope.version != doc.version:
            raise ValueError(f"passage {p.passage_id} does not belong to {doc.key}")


# --------------------------------------------------------------------------- cost


@dataclass
class CostAccount:
    """Thread-safe running totals for one contextualizer (or merged across executors)."""

    price_in_per_1k: float = 0.0
    price_out_per_1k: float = 0.0
    documents: int = 0
    passages: int = 0
    requests: int = 0  # HTTP requests sent, retries included
    input_tokens: int = 0
    output_tokens: int = 0
    estimated_usage: int = 0  # responses without `usage`: tokens estimated as chars/4
    retries: int = 0
    failures: int = 0  # request groups that never produced a usable answer
    fallbacks: int = 0  # request groups answered with the extractive preamble instead
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    _COUNTERS = (
        "documents", "passages", "requests", "input_tokens", "output_tokens",
        "estimated_usage", "retries", "failures", "fallbacks",
    )  # fmt: skip

    def add(self, **counts: int) -> None:
        with self._lock:
            for k, v in counts.items():
                if k not in self._COUNTERS:
                    raise KeyError(f"unknown counter {k!r}")
                setattr(self, k, getattr(self, k) + v)

    def merge(self, other: CostAccount | Mapping[str, Any]) -> None:
        """Add another account (or its snapshot), e.g. one per Spark partition."""
        src = other.snapshot() if isinstance(other, CostAccount) else other
        self.add(**{k: int(src.get(k, 0)) for k in self._COUNTERS})

    @property
    def cost(self) -> float:
        return self.input_tokens / 1000 * self.price_in_per_1k + self.output_tokens / 1000 * self.price_out_per_1k

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            snap: dict[str, Any] = {k: getattr(self, k) for k in self._COUNTERS}
            snap["cost"] = self.cost
        return snap

    # Locks do not pickle; Spark ships contextualizers to executors.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


# --------------------------------------------------------------------------- none


class NoContextualizer:
    name = "none"

    def __init__(self) -> None:
        self.account = CostAccount()

    def contextualize(self, doc: SourceDocument, passages: Sequence[Passage]) -> list[str]:
        return [""] * len(passages)

    def contextualize_many(self, items: Sequence[tuple[SourceDocument, Sequence[Passage]]]) -> list[list[str]]:
        return [self.contextualize(d, ps) for d, ps in items]

    @property
    def cost(self) -> dict[str, Any]:
        return self.account.snapshot()


# --------------------------------------------------------------------------- the llm kind's settings


class LLMSettings(BaseModel):
    """Configuration for the ``llm`` contextualizer (an OpenAI-compatible endpoint)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(min_length=1, description="e.g. http://localhost:8000/v1")
    model: str = Field(min_length=1)
    api_key_env: str | None = Field(default=None, description="env var the edge reads the key from")
    max_concurrency: int = Field(default=4, ge=1, le=256)
    max_retries: int = Field(default=3, ge=0, le=20)
    backoff_s: float = Field(default=0.5, ge=0)
    timeout_s: float = Field(default=30, gt=0)
    price_in_per_1k: float = Field(default=0.0, ge=0, description="currency per 1k input tokens")
    price_out_per_1k: float = Field(default=0.0, ge=0, description="currency per 1k output tokens")
    max_doc_chars: int = Field(default=12000, ge=200, description="the document is cut to this many chars")
    max_tokens: int = Field(default=100, ge=8, description="output budget per chunk sentence")
    # Past this many chunks a document is split into requests that share the identical
    # document prefix (cached by vLLM); one huge answer would overrun the output budget.
    max_chunks_per_request: int = Field(default=32, ge=1, le=512)
    max_context_chars: int = Field(default=400, ge=40, description="each returned sentence is clipped to this")
    temperature: float = Field(default=0.0, ge=0, le=2)
