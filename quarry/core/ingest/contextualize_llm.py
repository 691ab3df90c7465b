"""The ``llm`` contextualizer: situating sentences from an OpenAI-compatible
``/chat/completions`` endpoint (see :mod:`.contextualize` for pointing it at vLLM or Ray
Serve LLM).

One request carries the document once plus all of its chunks (numbered) and asks for a
JSON array with one situating sentence per chunk, so the document is paid for once per
document, not once per chunk. Bounded concurrency, retries with exponential backoff on
429/5xx/timeouts, a :class:`~.contextualize.CostAccount`, and the extractive preamble as
the fallback for a group that never gets a usable answer. The API key is passed in by
the edge; document text is never logged, only document ids.
"""

from __future__ import annotations

import logging
import math
import random
import re
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from quarry.core.ingest.contextualize import CostAccount, LLMSettings, check_same_doc
from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer, clip
from quarry.core.ingest.contextualize_llm_prompt import UnparseableReply, build_messages, parse_sentences
from quarry.core.records import Passage, SourceDocument

if TYPE_CHECKING:  # httpx is imported lazily: `import quarry.core` stays light
    import httpx

__all__ = ["LLMContextualizer", "LLMRequestError"]

log = logging.getLogger(__name__)

_WS = re.compile(r"\s+")


class LLMRequestError(RuntimeError):
    """The endpoint rejected the request (4xx other than 429): a configuration problem
    (wrong URL, model, key or payload), so retrying or falling back would hide it."""


class _GaveUp(Exception):
    pass


def _estimate_tokens(chars: int) -> int:
    return math.ceil(chars / 4)


class LLMContextualizer:
    """Situating sentences from an OpenAI-compatible chat-completions endpoint."""

    name = "llm"

    def __init__(
        self,
        settings: LLMSettings,
        api_key: SecretStr | str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self._api_key = SecretStr(api_key) if isinstance(api_key, str) else api_key
        self._transport = transport
        self.account = CostAccount(settings.price_in_per_1k, settings.price_out_per_1k)
        self._fallback = ExtractiveContextualizer()
        self._init_runtime()

    def _init_runtime(self) -> None:
        # Bounds in-flight requests across all callers of this instance, not just one call.
        self._slots = threading.BoundedSemaphore(self.settings.max_concurrency)
        self._client_lock = threading.Lock()
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:  # never the key
        return f"LLMContextualizer(model={self.settings.model!r}, base_url={self.settings.base_url!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_slots", "_client_lock", "_client"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def url(self) -> str:
        return self.settings.base_url.rstrip("/") + "/chat/completions"

    @property
    def cost(self) -> dict[str, Any]:
        return self.account.snapshot()

    def _http(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                import httpx

                headers = {"Content-Type": "application/json"}
                if self._api_key is not None:
                    headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
                n = self.settings.max_concurrency
                self._client = httpx.Client(
                    headers=headers,
                    timeout=httpx.Timeout(self.settings.timeout_s),
                    limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                    transport=self._transport,
                )
            return self._client

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> LLMContextualizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one HTTP exchange, with retries on 429/5xx/timeouts/connection errors

    def _post(self, payload: dict[str, Any], doc_id: str) -> dict[str, Any]:
        import httpx

        s = self.settings
        client = self._http()
        for attempt in range(s.max_retries + 1):
            if attempt:
                self.account.add(retries=1)
            wait = s.backoff_s * (2**attempt)
            try:
                with self._slots:
                    self.account.add(requests=1)
                    resp = client.post(self.url, json=payload)
            except (httpx.TimeoutException, httpx.TransportError) as e:
                reason = type(e).__name__
            else:
                if resp.status_code == 429 or resp.status_code >= 500:
                    reason = f"HTTP {resp.status_code}"
                    retry_after = resp.headers.get("retry-after", "")
                    if retry_after.replace(".", "", 1).isdigit():
                        wait = max(wait, min(float(retry_after), 60.0))
                elif resp.status_code >= 400:
                    raise LLMRequestError(
                        f"{self.url} answered HTTP {resp.status_code} for model {s.model!r} "
                        f"(doc {doc_id}): {resp.text[:300]}"
                    )
                else:
                    try:
                        return resp.json()
                    except ValueError:
                        return {}  # a 200 with a non-JSON body: the parse step handles it
            if attempt < s.max_retries:
                log.info("contextualize: doc %s attempt %d failed (%s); retrying", doc_id, attempt + 1, reason)
                time.sleep(min(wait, 30.0) * (1 + 0.1 * random.random()))  # jitter: no lockstep retries
        raise _GaveUp(reason)

    def _account_usage(self, data: Mapping[str, Any], messages: list[dict[str, str]], content: str) -> None:
        usage = data.get("usage") if isinstance(data, Mapping) else None
        try:
            tin, tout = int(usage["prompt_tokens"]), int(usage.get("completion_tokens") or 0)  # type: ignore[index,union-attr]
            self.account.add(input_tokens=tin, output_tokens=tout)
        except (TypeError, KeyError, ValueError):
            chars_in = sum(len(m["content"]) for m in messages)
            self.account.add(
                input_tokens=_estimate_tokens(chars_in),
                output_tokens=_estimate_tokens(len(content)),
                estimated_usage=1,
            )

    def _situate(self, doc: SourceDocument, passages: Sequence[Passage]) -> list[str]:
        """One request group: the document once, these chunks numbered."""
        s = self.settings
        chunks = [p.text for p in passages]
        failure = ""
        for reminder in (False, True):  # a reply we cannot parse is retried once
            messages = build_messages(doc, chunks, s.max_doc_chars, reminder=reminder)
            payload = {
                "model": s.model,
                "messages": messages,
                "temperature": s.temperature,
                "max_tokens": s.max_tokens * len(chunks) + 16,
            }
            try:
                data = self._post(payload, doc.doc_id)
            except _GaveUp as e:
                failure = f"gave up after {s.max_retries + 1} attempts ({e})"
                break
            content = ""
            try:
                content = data["choices"][0]["message"]["content"] or ""
            except (KeyError, IndexError, TypeError):
                pass
            self._account_usage(data, messages, content)
            try:
                sentences = parse_sentences(content, len(chunks))
            except UnparseableReply as e:
                failure = str(e)
                if not reminder:
                    self.account.add(retries=1)
                continue
            return [clip(_WS.sub(" ", x).strip(), s.max_context_chars) for x in sentences]
        log.warning("contextualize: doc %s fell back to extractive: %s", doc.doc_id, failure)
        self.account.add(failures=1, fallbacks=1)
        return self._fallback.contextualize(doc, passages)

    def contextualize(self, doc: SourceDocument, passages: Sequence[Passage]) -> list[str]:
        return self.contextualize_many([(doc, passages)])[0]

    def contextualize_many(self, items: Sequence[tuple[SourceDocument, Sequence[Passage]]]) -> list[list[str]]:
        """Preambles for many documents, up to ``max_concurrency`` requests in flight."""
        step = self.settings.max_chunks_per_request
        units: list[tuple[int, int, SourceDocument, Sequence[Passage]]] = []
        for i, (doc, passages) in enumerate(items):
            check_same_doc(doc, passages)
            self.account.add(documents=1, passages=len(passages))
            for start in range(0, len(passages), step):
                units.append((i, start, doc, passages[start : start + step]))
        out: list[list[str]] = [[""] * len(ps) for _, ps in items]

        def run(unit: tuple[int, int, SourceDocument, Sequence[Passage]]) -> None:
            i, start, doc, group = unit
            out[i][start : start + len(group)] = self._situate(doc, group)

        if len(units) <= 1:
            for u in units:
                run(u)
        else:
            pool = ThreadPoolExecutor(max_workers=min(self.settings.max_concurrency, len(units)))
            try:
                for f in [pool.submit(run, u) for u in units]:
                    f.result()  # re-raises LLMRequestError
            finally:
                # On a configuration error, stop sending the queued requests.
                pool.shutdown(wait=True, cancel_futures=True)
        return out
