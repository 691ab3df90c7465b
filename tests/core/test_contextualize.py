"""quarry.core.ingest.contextualize: extractive, none, and the llm path against a local fake
OpenAI-compatible server (tests/helpers/llm_server.py)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import time

import pytest

from quarry.core.ingest.contextualize import CostAccount, LLMSettings, NoContextualizer, with_context
from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer, lead_sentences
from quarry.core.ingest.contextualize_factory import make_contextualizer
from quarry.core.ingest.contextualize_llm import LLMContextualizer, LLMRequestError
from quarry.core.ingest.contextualize_llm_prompt import UnparseableReply, parse_sentences
from quarry.core.records import Envelope, Passage, SourceDocument

from helpers.llm_server import FakeLLMServer

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

RUNBOOK = """# Acme failover runbook

> Owner: the **SRE** team, see [the wiki](https://wiki/x).

This runbook explains how to fail over the *Acme* primary database to `eu-west-2`. It applies
until the cutover completes.

## Preconditions

Check replication lag is under 5 seconds.

## Steps

### Promote

Run `promote --region eu-west-2`.
"""


def make_doc(doc_id: str = "runbooks/acme-failover", title: str = "Acme failover runbook", text: str = RUNBOOK, **kw) -> SourceDocument:
    kw.setdefault("entities", ("acme",))
    kw.setdefault("doc_type", "runbook")
    return SourceDocument(doc_id=doc_id, version="3", tenant="t1", title=title, text=text, acl=("sre",), **kw)


def make_passages(doc: SourceDocument, sections: list[tuple[tuple[str, ...], str]]) -> list[Passage]:
    env = Envelope(
        doc_id=doc.doc_id, version=doc.version, tenant=doc.tenant, title=doc.title, acl=doc.acl,
        entities=doc.entities, doc_type=doc.doc_type, authority=doc.doc_type, authority_rank=60,
    )  # fmt: skip
    out = []
    for i, (path, text) in enumerate(sections):
        anchor = f"s{i}"
        out.append(
            Passage(
                passage_id=f"{doc.key}#{anchor}", anchor=anchor, heading_path=path, parent_id=f"{doc.key}#{anchor}",
                text=text, chunker_version="test", token_count=len(text.split()), envelope=env,
            )  # fmt: skip
        )
    return out


def runbook_passages(doc: SourceDocument) -> list[Passage]:
    return make_passages(
        doc,
        [
            (("Acme failover runbook",), "This runbook explains how to fail over the Acme primary database."),
            (("Acme failover runbook", "Preconditions"), "Check replication lag is under 5 seconds."),
            (("Acme failover runbook", "Steps", "Promote"), "Run promote --region eu-west-2."),
        ],
    )


def corpus(n_docs: int, chunks: int = 3) -> list[tuple[SourceDocument, list[Passage]]]:
    items = []
    for d in range(n_docs):
        doc = make_doc(doc_id=f"doc-{d}", title=f"Doc {d}", text=f"Doc {d} is about topic {d}. More.\n\nBody {d}.")
        items.append((doc, make_passages(doc, [(("Body",), f"chunk {d}.{c} text") for c in range(chunks)])))
    return items


def settings(srv: FakeLLMServer, **kw) -> LLMSettings:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 5)
    return LLMSettings(base_url=srv.base_url, model="fake-model", **kw)


# --------------------------------------------------------------------------- extractive / none


def test_extractive_content_and_determinism():
    doc = make_doc()
    ps = runbook_passages(doc)
    ctx = ExtractiveContextualizer()
    pre = ctx.contextualize(doc, ps)
    assert pre == ExtractiveContextualizer().contextualize(doc, ps)  # deterministic
    assert len(pre) == len(ps)
    # The H1 repeating the title is dropped; the callout is skipped for the first prose.
    assert pre[0] == (
        "From Acme failover runbook (runbook, acme). "
        "This runbook explains how to fail over the Acme primary database to eu-west-2."
    )
    assert pre[2].startswith("From Acme failover runbook (runbook, acme) — section: Steps > Promote.")
    for p in pre:
        assert "**" not in p and "[" not in p and "`" not in p
    assert ctx.cost["cost"] == 0 and ctx.cost["requests"] == 0


def test_extractive_lead_skips_headings_code_and_strips_markdown():
    text = "# Title\n\n```\ncode line.\n```\n\n| a | b |\n\nThe *first* sentence uses `x_y`. The second one.\n"
    doc = make_doc(text=text, entities=("acme", "globex"))
    assert lead_sentences(doc) == "The first sentence uses x_y."
    assert lead_sentences(doc, 2) == "The first sentence uses x_y. The second one."
    ps = make_passages(doc, [(("Title", "Usage"), "x")])
    (pre,) = ExtractiveContextualizer(max_lead_sentences=1).contextualize(doc, ps)
    assert pre == "From Acme failover runbook (runbook, acme, globex) — section: Title > Usage. The first sentence uses x_y."


def test_extractive_quote_only_document():
    doc = make_doc(text="# T\n\n> Only a **callout** here.\n")
    assert lead_sentences(doc) == "Only a callout here."


def test_extractive_python_docstring_and_clipping():
    doc = make_doc(text='#!/usr/bin/env python\n"""Rotate the Acme keys nightly. Uses KMS."""\nimport os\n', format="python", title="")
    assert lead_sentences(doc) == "Rotate the Acme keys nightly."
    ps = make_passages(doc, [(("rotate",), "def f(): ...")])
    (pre,) = ExtractiveContextualizer().contextualize(doc, ps)
    assert pre.startswith("From runbooks/acme-failover (runbook, acme)")  # no title: the doc id
    long = ExtractiveContextualizer(max_chars=40).contextualize(doc, ps)[0]
    assert len(long) <= 40 and long.endswith("…")


def test_extractive_rejects_foreign_passages():
    a, b = make_doc(doc_id="a"), make_doc(doc_id="b")
    with pytest.raises(ValueError, match="does not belong"):
        ExtractiveContextualizer().contextualize(a, runbook_passages(b))


def test_none_and_with_context():
    doc = make_doc()
    ps = runbook_passages(doc)
    assert NoContextualizer().contextualize(doc, ps) == ["", "", ""]
    out = with_context(ps, ["a", "b", "c"])
    assert [p.context for p in out] == ["a", "b", "c"]
    assert [p.text for p in out] == [p.text for p in ps]
    assert all(p.context == "" for p in ps)  # originals untouched (frozen records)
    with pytest.raises(ValueError):
        with_context(ps, ["a"])


def test_make_contextualizer():
    assert make_contextualizer().name == "extractive"
    assert make_contextualizer("none").name == "none"
    with pytest.raises(ValueError, match="allowed: extractive, llm, none"):
        make_contextualizer("gpt")
    with pytest.raises(ValueError, match="needs LLM settings"):
        make_contextualizer("llm")
    c = make_contextualizer("llm", LLMSettings(base_url="http://127.0.0.1:9/v1", model="m"), api_key="sk-secret")
    assert c.name == "llm" and "sk-secret" not in repr(c)


def test_import_stays_light():
    code = "import sys, quarry.core, quarry.core.ingest.contextualize_factory; bad = {'httpx', 'torch', 'ray', 'pyspark'} & set(sys.modules); assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_parse_sentences_is_robust():
    assert parse_sentences('```json\n["a", "b"]\n```', 2) == ["a", "b"]
    assert parse_sentences('<think>hmm [x]</think>Sure: ["a"] done', 1) == ["a"]
    assert parse_sentences('{"contexts": ["a", "b"]}', 2) == ["a", "b"]
    for bad in ("", "no array", '["a"]', "[1, 2]"):
        with pytest.raises(UnparseableReply):
            parse_sentences(bad, 2)


# --------------------------------------------------------------------------- llm


def test_llm_one_request_per_document():
    items = corpus(3, chunks=4)
    with FakeLLMServer() as srv, LLMContextualizer(settings(srv), api_key="sk-test") as ctx:
        out = ctx.contextualize_many(items)
    assert srv.requests == 3  # per document, not per chunk (12)
    for (doc, ps), pre in zip(items, out):
        assert pre == [f"Chunk {i} of {doc.title}." for i in range(1, len(ps) + 1)]
    for payload in srv.payloads:  # the document travels once, with every chunk
        user = payload["messages"][1]["content"]
        assert payload["model"] == "fake-model"
        assert user.count("<document>") == 1 and user.count('<chunk id="') == 4
    assert {h["authorization"] for h in srv.headers} == {"Bearer sk-test"}
    snap = ctx.cost
    assert snap["documents"] == 3 and snap["passages"] == 12 and snap["requests"] == 3
    assert snap["retries"] == snap["fallbacks"] == 0


def test_llm_preambles_land_in_context_not_text():
    doc = make_doc()
    ps = runbook_passages(doc)
    with FakeLLMServer() as srv, LLMContextualizer(settings(srv)) as ctx:
        out = with_context(ps, ctx.contextualize(doc, ps))
    assert srv.requests == 1
    assert [p.context for p in out] == [f"Chunk {i} of Acme failover runbook." for i in (1, 2, 3)]
    assert [p.text for p in out] == [p.text for p in ps]
    assert "authorization" not in srv.headers[0]  # no key configured: no header


def test_llm_retries_5xx_then_succeeds():
    doc = make_doc()
    ps = runbook_passages(doc)
    with FakeLLMServer(fail_first=2) as srv, LLMContextualizer(settings(srv, max_retries=3)) as ctx:
        pre = ctx.contextualize(doc, ps)
    assert pre == [f"Chunk {i} of Acme failover runbook." for i in (1, 2, 3)]
    assert srv.requests == 3
    assert ctx.cost["retries"] == 2 and ctx.cost["requests"] == 3 and ctx.cost["fallbacks"] == 0


def test_llm_retries_429():
    doc = make_doc()
    with FakeLLMServer(fail_first=1, fail_status=429) as srv, LLMContextualizer(settings(srv)) as ctx:
        ctx.contextualize(doc, runbook_passages(doc))
    assert srv.requests == 2 and ctx.cost["retries"] == 1


def test_llm_slow_response_is_retried():
    doc = make_doc()
    t0 = time.monotonic()
    with FakeLLMServer(slow_first=1, slow_s=5) as srv, LLMContextualizer(settings(srv, timeout_s=0.3)) as ctx:
        pre = ctx.contextualize(doc, runbook_passages(doc))
    assert time.monotonic() - t0 < 4
    assert pre[0] == "Chunk 1 of Acme failover runbook."
    assert ctx.cost["retries"] == 1 and ctx.cost["fallbacks"] == 0


def test_llm_gives_up_and_falls_back_without_hanging():
    doc = make_doc()
    ps = runbook_passages(doc)
    t0 = time.monotonic()
    with FakeLLMServer(slow_first=100, slow_s=10) as srv, LLMContextualizer(settings(srv, timeout_s=0.2, max_retries=2)) as ctx:
        pre = ctx.contextualize(doc, ps)
    assert time.monotonic() - t0 < 5
    assert pre == ExtractiveContextualizer().contextualize(doc, ps)
    assert srv.requests == 3
    snap = ctx.cost
    assert snap["retries"] == 2 and snap["failures"] == 1 and snap["fallbacks"] == 1
    assert snap["input_tokens"] == 0  # nothing answered, nothing billed


def test_llm_bad_reply_is_retried_once_then_falls_back():
    doc = make_doc()
    ps = runbook_passages(doc)
    with FakeLLMServer(answer=lambda p: '["only one"]') as srv, LLMContextualizer(settings(srv)) as ctx:
        pre = ctx.contextualize(doc, ps)
    assert srv.requests == 2  # the reply parsed to the wrong count: one retry, then fall back
    assert pre == ExtractiveContextualizer().contextualize(doc, ps)
    assert ctx.cost["fallbacks"] == 1 and ctx.cost["retries"] == 1
    assert ctx.cost["input_tokens"] == sum(u[0] for u in srv.usages)  # both replies were billed


def test_llm_bounded_concurrency():
    items = corpus(8, chunks=2)
    with FakeLLMServer(delay_s=0.15) as srv, LLMContextualizer(settings(srv, max_concurrency=2)) as ctx:
        out = ctx.contextualize_many(items)
    assert srv.requests == 8 and len(out) == 8
    assert srv.max_in_flight == 2  # used, and never exceeded


def test_llm_long_document_splits_into_groups_sharing_the_prefix():
    doc = make_doc()
    ps = make_passages(doc, [(("Steps",), f"step {i}") for i in range(5)])
    with FakeLLMServer() as srv, LLMContextualizer(settings(srv, max_chunks_per_request=2)) as ctx:
        pre = ctx.contextualize(doc, ps)
    assert srv.requests == 3
    assert pre == [f"Chunk {i} of Acme failover runbook." for i in (1, 2, 1, 2, 1)]
    prefixes = {p["messages"][1]["content"].split("Here are")[0] for p in srv.payloads}
    assert len(prefixes) == 1  # identical document prefix: cacheable by the server


def test_llm_cost_account_arithmetic():
    items = corpus(3)
    s = lambda srv: settings(srv, price_in_per_1k=0.5, price_out_per_1k=2.0)  # noqa: E731
    with FakeLLMServer() as srv, LLMContextualizer(s(srv)) as ctx:
        ctx.contextualize_many(items)
    tin = sum(u[0] for u in srv.usages)
    tout = sum(u[1] for u in srv.usages)
    snap = ctx.cost
    assert (snap["input_tokens"], snap["output_tokens"]) == (tin, tout) and tin > 0 and tout > 0
    assert snap["cost"] == pytest.approx(tin / 1000 * 0.5 + tout / 1000 * 2.0)
    assert snap["estimated_usage"] == 0


def test_llm_cost_estimated_without_usage():
    doc = make_doc()
    with FakeLLMServer(usage=False) as srv, LLMContextualizer(settings(srv, price_in_per_1k=1.0)) as ctx:
        ctx.contextualize(doc, runbook_passages(doc))
    chars = sum(len(m["content"]) for m in srv.payloads[0]["messages"])
    assert ctx.cost["input_tokens"] == -(-chars // 4)
    assert ctx.cost["estimated_usage"] == 1
    assert ctx.cost["cost"] == pytest.approx(ctx.cost["input_tokens"] / 1000)


def test_llm_400_raises_clearly():
    doc = make_doc()
    with FakeLLMServer(status=400) as srv, LLMContextualizer(settings(srv)) as ctx:
        with pytest.raises(LLMRequestError, match="HTTP 400.*fake-model"):
            ctx.contextualize_many(corpus(3))
    assert srv.requests <= 3 and ctx.cost["retries"] == 0


def test_cost_account_merge_and_pickle():
    a = CostAccount(price_in_per_1k=1.0)
    a.add(requests=2, input_tokens=1000)
    b = pickle.loads(pickle.dumps(a))
    b.merge(a.snapshot())
    assert b.requests == 4 and b.cost == pytest.approx(2.0)
    with pytest.raises(KeyError):
        a.add(bogus=1)


def test_llm_contextualizer_pickles_after_use():
    doc = make_doc()
    with FakeLLMServer() as srv:
        ctx = LLMContextualizer(settings(srv), api_key="sk-test")
        ctx.contextualize(doc, runbook_passages(doc))
        clone = pickle.loads(pickle.dumps(ctx))  # Spark ships it to executors
        assert clone.contextualize(doc, runbook_passages(doc))[0] == "Chunk 1 of Acme failover runbook."
        ctx.close()
        clone.close()
    assert srv.headers[-1]["authorization"] == "Bearer sk-test"
