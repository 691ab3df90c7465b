import re

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from quarry.core.ingest.chunking import (
    CHUNKER_VERSION,
    ChunkSettings,
    chunk_document,
    plan_chunks,
)
from quarry.core.records import DEFAULT_AUTHORITY, SourceDocument
from quarry.core.text.units import count_tokens, split_sentences

pytestmark = pytest.mark.unit


def doc(text, fmt="markdown", **kw):
    base = dict(doc_id="kb/eur", version="3", tenant="acme", title="EUR settlement", text=text,
                format=fmt, acl=("ops",), doc_type="runbook")
    base.update(kw)
    return SourceDocument(**base)


def nonspace(s):
    return re.sub(r"\s+", "", s)


RUNBOOK = """Read this first.

# Settlement

Settlement runs daily.

## EUR cutoff

EUR payments cut off at 16:00 CET.

## EUR cutoff

A second section with the same heading.

# Appendix
"""


@pytest.mark.parametrize("kw", [dict(max_tokens=0), dict(overlap_sentences=-1), dict(min_tokens=-1),
                                dict(max_tokens=10, min_tokens=11), dict(max_tokens=True)])
def test_settings_validation(kw):
    with pytest.raises(ValueError):
        ChunkSettings(**kw)


def test_headings_give_heading_path_parents_and_unique_anchors():
    passages, parents = chunk_document(doc(RUNBOOK))
    by_anchor = {p.anchor: p for p in parents}
    assert list(by_anchor) == ["top", "settlement", "eur-cutoff", "eur-cutoff-2"]  # empty "Appendix" has no body
    assert by_anchor["eur-cutoff"].heading_path == ("Settlement", "EUR cutoff")
    assert by_anchor["eur-cutoff"].text == "EUR payments cut off at 16:00 CET."
    assert by_anchor["settlement"].text == "Settlement runs daily."  # own body only, not children
    assert by_anchor["top"].heading_path == ()
    assert by_anchor["eur-cutoff"].parent_id == "kb/eur@3#eur-cutoff"
    ids = [p.passage_id for p in passages]
    assert len(set(ids)) == len(ids)
    assert "kb/eur@3#eur-cutoff.1" in ids
    assert not set(ids) & {p.parent_id for p in parents}  # passage ids never equal parent ids
    for p in passages:
        assert p.parent_id in {q.parent_id for q in parents}
        assert p.anchor.startswith(p.parent_id.split("#")[1] + ".")
        assert p.chunker_version == CHUNKER_VERSION and p.context == ""
        assert p.text and p.text == p.text.strip() and p.text in RUNBOOK
        assert p.token_count == count_tokens(p.text)
    assert all("EUR settlement" not in p.heading_path for p in passages)  # title not in the path


def test_envelope_copied_with_authority_rank():
    d = doc("Some text.", entities=("acme",), source_url="https://kb/eur")
    (p,), (parent,) = chunk_document(d)
    env = p.envelope
    assert (env.tenant, env.acl, env.entities, env.doc_type) == ("acme", ("ops",), ("acme",), "runbook")
    assert (env.authority, env.authority_rank) == ("runbook", DEFAULT_AUTHORITY["runbook"])
    assert parent.envelope == env
    p2 = chunk_document(doc("x y", authority="policy"))[0][0]
    assert (p2.envelope.authority, p2.envelope.authority_rank) == ("policy", 100)
    p3 = chunk_document(doc("x y", doc_type="memo"), authority={"memo": 7, "unknown": 1})[0][0]
    assert p3.envelope.authority_rank == 7
    p4 = chunk_document(doc("x y", doc_type="odd"), authority={"unknown": 3})[0][0]
    assert p4.envelope.authority_rank == 3


def big_table(rows):
    return "\n".join(["| ccy | cutoff | note |", "|---|---|---|"]
                     + [f"| C{i} | 16:{i:02d} | settles same day |" for i in range(rows)])


@pytest.mark.parametrize("caption_before", [True, False])
def test_table_with_caption_never_split_even_when_oversized(caption_before):
    table = big_table(30)
    caption = "Table 2: EUR and other cutoffs"
    body = f"{caption}\n\n{table}" if caption_before else f"{table}\n*Cutoffs per currency*"
    text = f"# Cutoffs\n\nIntro paragraph before.\n\n{body}\n\nAfter paragraph."
    s = ChunkSettings(max_tokens=30, min_tokens=0)
    passages, _ = chunk_document(doc(text), s)
    holders = [p for p in passages if "| C0 |" in p.text]
    assert len(holders) == 1 and "| C29 |" in holders[0].text
    assert (caption if caption_before else "*Cutoffs per currency*") in holders[0].text
    assert holders[0].token_count > s.max_tokens
    assert not any("| C5 |" in p.text for p in passages if p is not holders[0])


def test_code_fence_not_split_below_hard_limit_and_oversize_flagged():
    code = "```\n" + "\n".join(f"step_{i} = run({i})" for i in range(12)) + "\n```"
    text = f"## Deploy\n\nRun these:\n\n{code}\n\nDone."
    s = ChunkSettings(max_tokens=40, min_tokens=0)
    assert s.max_tokens < count_tokens(code) <= 4 * s.max_tokens
    passages, _ = chunk_document(doc(text), s)
    assert [p.text for p in passages if "step_0" in p.text] == [code]
    for section, chunks in plan_chunks(doc(text), s):
        for c in chunks:
            n = count_tokens(text[c.start:c.end])
            assert c.oversized == (n > s.max_tokens)
            if c.oversized:
                assert c.kinds in (("code",), ("table",))


def test_python_fence_over_hard_limit_splits_at_def_boundaries():
    funcs = ["def f%d(x):\n    total = x + %d\n    return total * 2 + len(str(x))\n" % (i, i) for i in range(12)]
    code = "```python\n" + "\n".join(funcs) + "```"
    s = ChunkSettings(max_tokens=30, min_tokens=0)
    assert count_tokens(code) > 4 * s.max_tokens
    passages, _ = chunk_document(doc(code), s)
    for p in passages:
        for i in range(12):  # each function whole in exactly one passage
            if f"def f{i}(" in p.text:
                assert f"return total * 2 + len(str(x))" in p.text.split(f"def f{i}(")[1]
    assert sum(p.text.count("def f") for p in passages) == 12


def test_python_format_def_class_boundaries():
    src = '''"""Settlement helpers."""
import datetime

CUTOFF = "16:00"


# Shared by every currency.
def reconcile_settlement(batch):
    return [b for b in batch if b]


@dataclass
class Ledger:
    def post(self, entry):
        return entry

if __name__ == "__main__":
    reconcile_settlement([])
'''
    passages, parents = chunk_document(doc(src, fmt="python"), ChunkSettings(max_tokens=200))
    by = {p.anchor: p for p in parents}
    assert set(by) == {"module", "reconcile_settlement", "Ledger"}
    assert by["reconcile_settlement"].heading_path == ("reconcile_settlement",)
    assert by["reconcile_settlement"].text.startswith("# Shared by every currency.\ndef reconcile_settlement")
    assert by["Ledger"].text.startswith("@dataclass\nclass Ledger")
    assert "import datetime" in by["module"].text and "__main__" in by["module"].text
    assert not any("def post" in p.text and "import datetime" in p.text for p in passages)
    # module section comes first, so compare as multisets: nothing lost, nothing duplicated
    assert sorted(nonspace("".join(p.text for p in passages))) == sorted(nonspace(src))


def test_python_syntax_error_falls_back_to_regex_boundaries():
    src = "x = (\n\ndef a():\n    pass\n\ndef b(:\n    pass\n"
    _, parents = chunk_document(doc(src, fmt="python"))
    assert [p.anchor for p in parents] == ["module", "a", "b"]


def test_list_items_are_seams():
    items = [f"- Step {i}: check the {i}th ledger for unmatched entries and escalate." for i in range(8)]
    items.insert(3, "  - nested detail stays with step 2")
    text = "# Checklist\n\n" + "\n".join(items)
    s = ChunkSettings(max_tokens=40, min_tokens=0)
    passages, _ = chunk_document(doc(text), s)
    assert len(passages) > 1
    for p in passages:
        assert p.text.startswith("- Step")  # chunks start at an item, never mid-item
        assert p.token_count <= s.max_tokens
    step2 = [p for p in passages if "Step 2:" in p.text][0]
    assert "nested detail" in step2.text
    assert sum(p.text.count("- Step") for p in passages) == 8  # packed, not overlapped


def long_prose(n):
    return " ".join(f"Sentence number {i} talks about settlement batch {i} in detail." for i in range(n))


def test_sentence_fallback_with_overlap_for_long_unstructured_text():
    s = ChunkSettings(max_tokens=30, overlap_sentences=1)
    passages, parents = chunk_document(doc(long_prose(10), fmt="text"), s)
    assert len(parents) == 1 and parents[0].anchor == "top"
    assert len(passages) > 2
    for a, b in zip(passages, passages[1:]):
        assert split_sentences(a.text)[-1] == split_sentences(b.text)[0]  # one sentence of overlap
    for p in passages:
        assert p.token_count <= s.max_tokens
        assert re.fullmatch(r"Sentence.*\.", p.text, re.S)  # whole sentences only


def test_no_overlap_between_structured_blocks():
    paras = "\n\n".join(f"Paragraph {i} says one thing about cutoffs." for i in range(10))
    passages, _ = chunk_document(doc(paras), ChunkSettings(max_tokens=20, overlap_sentences=2, min_tokens=0))
    assert len(passages) > 1
    joined = "".join(p.text for p in passages)
    assert nonspace(joined) == nonspace(paras)  # each paragraph exactly once


def test_single_oversized_sentence_is_token_split():
    s = ChunkSettings(max_tokens=10, overlap_sentences=0, min_tokens=0)
    text = " ".join(f"w{i}" for i in range(35))
    passages, _ = chunk_document(doc(text, fmt="text"), s)
    assert [p.token_count for p in passages] == [10, 10, 10, 5]


def test_stable_ids_and_version_changes_ids():
    a1 = chunk_document(doc(RUNBOOK))[0]
    a2 = chunk_document(doc(RUNBOOK))[0]
    assert [(p.passage_id, p.text) for p in a1] == [(p.passage_id, p.text) for p in a2]
    b = chunk_document(doc(RUNBOOK, version="4"))[0]
    assert [p.text for p in a1] == [p.text for p in b]
    assert not {p.passage_id for p in a1} & {p.passage_id for p in b}


def test_max_tokens_respected_except_atomic_blocks():
    text = RUNBOOK + "\n## Mixed\n\n" + long_prose(8) + "\n\n" + big_table(20) + "\n\n- a\n- b\n"
    s = ChunkSettings(max_tokens=25, min_tokens=0)
    plan = plan_chunks(doc(text), s)
    for _, chunks in plan:
        for c in chunks:
            n = count_tokens(text[c.start:c.end])
            assert (n > s.max_tokens) == c.oversized
            if c.oversized:
                assert c.kinds == ("table",)


# ------------------------------------------------------------------ nothing lost (property)

_word = st.text(alphabet="abcxyzABC0123.,:!?-_()", min_size=1, max_size=8)
_line = st.lists(_word, min_size=1, max_size=12).map(" ".join)
_para = st.lists(_line, min_size=1, max_size=4).map("\n".join)
_items = st.lists(_line, min_size=1, max_size=5).map(lambda ls: "\n".join(f"- {l}" for l in ls))
_table = st.lists(st.lists(_word, min_size=2, max_size=2), min_size=1, max_size=6).map(
    lambda rows: "Table: t\n| a | b |\n|---|---|\n" + "\n".join(f"| {x} | {y} |" for x, y in rows))
_fence = st.lists(_line, min_size=0, max_size=6).map(lambda ls: "```\n" + "\n".join(ls) + "\n```")
_block = st.one_of(_para, _items, _table, _fence)
_heading = st.tuples(st.integers(1, 4), st.text(alphabet="abcEUR 12", min_size=1, max_size=10)).map(
    lambda t: "#" * t[0] + " " + t[1])
_doc = st.lists(st.one_of(_heading, _block), min_size=1, max_size=12)


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=_doc, max_tokens=st.integers(5, 60))
def test_nothing_lost_markdown(parts, max_tokens):
    text = "\n\n".join(parts)
    if not text.strip():
        return
    s = ChunkSettings(max_tokens=max_tokens, overlap_sentences=0, min_tokens=min(8, max_tokens))
    passages, parents = chunk_document(doc(text), s)
    body = "".join(p for p in parts if not p.startswith("#"))
    # Without overlap the passages are an exact, ordered partition of the non-heading content.
    assert nonspace("".join(p.text for p in passages)) == nonspace(body)
    assert all(p.text.strip() for p in passages)
    assert len({p.passage_id for p in passages}) == len(passages)
    assert len({p.parent_id for p in parents}) == len(parents)
    assert nonspace("".join(p.text for p in parents)) == nonspace(body)
    for p in passages:
        assert p.token_count <= max_tokens or p.text.lstrip().startswith(("Table", "|", "```"))
    assert [p.passage_id for p in chunk_document(doc(text), s)[0]] == [p.passage_id for p in passages]


@hsettings(max_examples=100, deadline=None)
@given(text=st.text(min_size=1, max_size=400), max_tokens=st.integers(1, 30), overlap=st.integers(0, 2),
       fmt=st.sampled_from(["markdown", "text", "python"]))
def test_every_nonspace_char_survives_any_input(text, max_tokens, overlap, fmt):
    if not text.strip():
        return
    d = doc(text, fmt=fmt)
    passages, _ = chunk_document(d, ChunkSettings(max_tokens=max_tokens, overlap_sentences=overlap, min_tokens=0))
    covered = "".join(p.text for p in passages)
    for line in text.split("\n"):
        stripped = line.strip()
        if fmt == "markdown" and re.match(r"^ {0,3}#{1,6}(?:[ \t]|$)", line):
            continue  # heading lines live in heading_path (or nowhere, if their section is empty)
        for ch in nonspace(stripped):
            assert ch in covered, (ch, line)
    assert all(p.text.strip() for p in passages)  # no blank passage is ever emitted
