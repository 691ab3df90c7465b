"""The search path as stages: one first stage, the second stage as data, expansion, and
resolution with its contradiction follow-ups, composed by ``search`` in serving's order.

Resolution here is driven by hand-made decisions (monkeypatched ``resolve`` and
``follow_up_queries``) so the composition is tested on its own; the Acme case at the end
checks the real resolver's rules.
"""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.evidence import resolve as resolve_mod
from quarry.core.search import resolution as resolution_mod
from quarry.core.agent.citations import Claim, check_claims
from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.index.shards import TenantIndex
from quarry.core.records import Decision, Principal, RejectedEvidence, SearchRequest, SelectedEvidence
from quarry.core.agent.runs import new_run, record_results, reserve_search
from quarry.core.search.in_process import search
from quarry.core.search.retrieval import dense_leg, first_stage, fuse, lexical_leg
from quarry.core.search.settings import SearchSettings
from quarry.core.search.survivors import apply_second_stage
from quarry.core.search.records import RankedCandidate, RerankOutcome

pytestmark = [pytest.mark.unit]

EMB = HashingEmbedder(dim=64)
STAFF = Principal(tenant="acme", subject="t", groups=frozenset({"all-staff"}))
ACME_Q = "What is the EUR settlement cutoff for Acme?"
NO_GRAPH = SearchSettings(graph_hops=0, resolution_pool=0)  # the contradiction search runs only when the graph links nothing; no pool: only follow-ups add evidence


@pytest.fixture(scope="module")
def acme(tmp_path_factory, sample_docs):
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path_factory.mktemp("acme-hashing"))
    build_corpus([d for d in sample_docs if d.tenant == "acme"], root, EMB)
    return TenantIndex.load(root, "acme")


@pytest.mark.parametrize("query", [ACME_Q, "webhook retries E-4471", "refund policy window days"])
def test_first_stage_is_the_legs_then_rrf_and_search_keeps_its_order(acme, query):
    """Oracle: the legs and RRF called directly, as every caller composed them before."""
    s = SearchSettings()
    req = SearchRequest(query=query, top_k=6)
    masks = acme.masks(STAFF)
    lex = lexical_leg(acme, masks, query, s.lexical_width, s.lexical_floor)
    den = dense_leg(acme, masks, EMB.encode([query])[0], s.dense_width, s.dense_floor)
    want = [c.passage_id for c in fuse(lex, den, acme, s)]
    fs = first_stage(acme, STAFF, req, EMB, s)
    assert [c.passage_id for c in fs.candidates] == want and want
    assert fs.lexical_rows == lex.rows and fs.dense_rows == den.rows and fs.generation == acme.generation
    # resolution never reorders relevance: the excerpts are the fused top-k, resolved or not
    resolved = search(acme, STAFF, req, EMB, s)
    plain = search(acme, STAFF, req, EMB, s, resolve=False)
    assert [e.passage_id for e in resolved.excerpts] == [e.passage_id for e in plain.excerpts] == want[:6]
    assert plain.decision is None and all(e.verdict is None for e in plain.excerpts)
    assert resolved.decision is not None and all(e.verdict is not None for e in resolved.excerpts)
    assert [st.name for st in resolved.stages] == ["filter", "lexical", "dense", "fuse", "rerank", "expand", "resolve"]


def test_second_stage_applies_ranked_ids_and_refuses_strangers(acme):
    fs = first_stage(acme, STAFF, SearchRequest(query=ACME_Q), EMB)
    ids = [c.passage_id for c in fs.candidates]
    ranked = tuple(RankedCandidate(passage_id=pid, rerank_score=float(i), rerank_rank=i)
                   for i, pid in enumerate(reversed(ids[:5]), start=1))
    out = apply_second_stage(fs, RerankOutcome(status="applied", ranked=ranked), 3)
    assert out.survivors == tuple(reversed(ids[:5]))[:3] and out.status == "applied"
    assert [c.passage_id for c in out.candidates] == ids  # the trace keeps fused order
    assert {c.passage_id: c.rerank_rank for c in out.candidates if c.rerank_rank} == {
        r.passage_id: r.rerank_rank for r in ranked}
    skipped = apply_second_stage(fs, RerankOutcome(status="failed"), 3)
    assert skipped.survivors == tuple(ids[:3]) and "unavailable" in skipped.report.note
    stranger = ranked + (RankedCandidate(passage_id="globex-secret@1#x", rerank_score=9.0, rerank_rank=6),)
    with pytest.raises(ValueError, match="not candidates"):
        apply_second_stage(fs, RerankOutcome(status="applied", ranked=stranger), 3)


def test_search_with_an_in_process_second_stage_delivers_its_order(acme):
    def reverse(query, cands, passages, top_k):
        kept = list(reversed(cands))[:top_k]
        return [c.model_copy(update={"rerank_score": -i, "rerank_rank": i}) for i, c in enumerate(kept, 1)]

    req = SearchRequest(query=ACME_Q, top_k=3)
    fs = first_stage(acme, STAFF, req, EMB)
    res = search(acme, STAFF, req, EMB, second_stage=reverse)
    assert [e.passage_id for e in res.excerpts] == [c.passage_id for c in reversed(fs.candidates)][:3]
    assert next(st for st in res.stages if st.name == "rerank").kept == 3


def test_hand_made_decision_sets_verdicts_and_follow_ups_join_the_decision_only(acme, monkeypatch):
    """resolve() rejects the top excerpt; one contradiction query runs through the first
    stage under the same principal; resolve() runs again over delivered + found."""
    calls: list[list[str]] = []

    def fake_resolve(passages, principal, valid_at=None, authority=None, **kw):
        ids = sorted(p.passage_id for p in passages)
        calls.append(ids)
        top = first_id[0]
        return Decision(valid_at=valid_at or dt.date(2026, 2, 1),
                        governing=tuple(SelectedEvidence(passage_id=i, reason="answers") for i in ids if i != top),
                        rejected=(RejectedEvidence(passage_id=top, reason="condition_ended", by=ids[-1]),))

    monkeypatch.setattr(resolution_mod, "resolve_evidence", fake_resolve)
    monkeypatch.setattr(resolution_mod, "follow_up_queries", lambda d, ps: ["acme cutover completed", "  "])
    req = SearchRequest(query="settlement runbook EUR cutoff", top_k=3)
    plain = search(acme, STAFF, req, EMB, resolve=False)
    first_id = [plain.excerpts[0].passage_id]
    res = search(acme, STAFF, req, EMB, NO_GRAPH)
    delivered = [e.passage_id for e in res.excerpts]
    assert delivered == [e.passage_id for e in plain.excerpts]  # same order, rejected or not
    assert res.excerpts[0].verdict == "rejected" and all(e.verdict == "governing" for e in res.excerpts[1:])
    assert len(calls) == 2 and set(delivered) < set(calls[1])  # resolved again over the union
    found = set(calls[1]) - set(delivered)
    assert found and found <= {i for s in res.decision.selected for i in [s.passage_id]}
    assert found.isdisjoint(delivered)  # follow-up evidence is in the decision, not delivered
    narrow = first_stage(acme, STAFF, SearchRequest(query="acme cutover completed", top_k=3), EMB,
                         SearchSettings(candidate_width=3))
    assert found <= {c.passage_id for c in narrow.candidates}
    rep = next(st for st in res.stages if st.name == "resolve")
    assert rep.dropped == 1 and "1 follow-up query added" in rep.note
    assert res.decision.rejected_ids == {first_id[0]}


def test_follow_ups_keep_the_principal_and_filters(acme, monkeypatch):
    seen: list[set[str]] = []
    monkeypatch.setattr(resolution_mod, "follow_up_queries", lambda d, ps: ["ticket comment exception cutover"])
    real = resolution_mod.resolve_evidence

    def spy(passages, principal, valid_at=None, authority=None, **kw):
        seen.append({p.envelope.doc_type for p in passages})
        assert all(principal.can_read(p.tenant, p.envelope.acl) for p in passages)
        return real(passages, principal, valid_at, authority, **kw)

    monkeypatch.setattr(resolution_mod, "resolve_evidence", spy)
    res = search(acme, STAFF, SearchRequest(query="settlement cutoff", top_k=2, doc_type=("policy",)), EMB, NO_GRAPH)
    assert res.excerpts and seen and all(s == {"policy"} for s in seen)  # the ticket comment never joins
    empty = search(acme, STAFF, SearchRequest(query="settlement cutoff", doc_type=("no-such-type",)), EMB)
    assert not empty.excerpts and empty.message and empty.decision.selected == ()


def test_fifth_check_and_run_state_with_a_hand_made_decision():
    run = reserve_search(new_run("r", STAFF))
    run, _ = record_results(run, ["ticket@1#c17", "policy@3#eur"], rejected_ids=["ticket@1#c17"])
    run, _ = record_results(reserve_search(run), ["deploy@1#s"], rejected_ids=[])
    assert run.rejected_ids == {"ticket@1#c17"}  # kept across the run's searches
    texts = {"ticket@1#c17": "Acme remains on the 16:00 cutoff until cutover.",
             "policy@3#eur": "Migrated tenants use the 15:00 EUR cutoff."}
    bad = Claim(statement="The cutoff is 16:00.", passage_id="ticket@1#c17", quote="remains on the 16:00 cutoff")
    good = Claim(statement="The cutoff is 15:00.", passage_id="policy@3#eur", quote="Migrated tenants use the 15:00")
    report = check_claims([good, bad], run.retrieved_ids, texts.get, rejected=run.rejected_ids)
    assert not report.passed and report.abstention_reason == "cites_rejected_evidence"
    assert [c.failed_checks for c in report.claims] == [(), ("not_rejected",)]
    assert check_claims([good], run.retrieved_ids, texts.get, rejected=run.rejected_ids).passed
    wrong = Claim(statement="The cutoff is 14:00.", passage_id="policy@3#eur", quote="Migrated tenants use the 15:00")
    assert check_claims([wrong], run.retrieved_ids, texts.get, rejected=run.rejected_ids).abstention_reason == \
        "citation_check_failed"


def test_acme_question_resolves_as_the_seed(acme):
    res = search(acme, STAFF, SearchRequest(query=ACME_Q, top_k=10, valid_at=None), EMB)
    d = res.decision
    rejected = {r.passage_id: r for r in d.rejected}
    ticket = [pid for pid in rejected if pid.startswith("ticket-482-comment-17@")]
    assert ticket and rejected[ticket[0]].reason == "condition_ended"
    assert rejected[ticket[0]].by.startswith("deploy-acme-cutover@")
    runbook = [pid for pid in rejected if pid.startswith("settlement-runbook@2#")]
    assert runbook and all(rejected[p].reason == "superseded_by" and rejected[p].by.startswith("settlement-policy@3")
                           for p in runbook)
    governing = {s.passage_id.split("#")[0] for s in d.governing}
    supporting = {s.passage_id.split("#")[0] for s in d.supporting}
    assert governing == {"settlement-policy@3"} and "deploy-acme-cutover@1" in supporting and d.unresolved == ()
    assert {e.passage_id: e.verdict for e in res.excerpts if e.passage_id in rejected} == {
        p: "rejected" for p in rejected if p in {e.passage_id for e in res.excerpts}}


class _CountingEmbedder:
    """The hashing embedder, counting the texts it encodes and the calls."""

    def __init__(self):
        self.calls, self.texts = 0, 0
        self.name, self.dim = EMB.name, EMB.dim

    def encode(self, texts):
        self.calls += 1
        self.texts += len(texts)
        return EMB.encode(texts)


def test_lexical_only_first_stage_encodes_nothing_and_keeps_the_lexical_order(acme):
    s = SearchSettings()
    req = SearchRequest(query="webhook retries E-4471", top_k=6)
    fs = first_stage(acme, STAFF, req, None, s, dense=False)  # no embedder needed
    lex = lexical_leg(acme, acme.masks(STAFF), req.query, s.lexical_width, s.lexical_floor)
    assert fs.dense_rows == () and fs.lexical_rows == lex.rows
    assert [c.row for c in fs.candidates] == list(lex.rows[: s.candidate_width])
    assert next(st for st in fs.stages if st.name == "dense").note.startswith("off")


def test_follow_up_encodings_are_one_batch_or_none(acme, monkeypatch):
    queries = ["settlement cutoff superseded exception", "refund window revoked completed"]
    monkeypatch.setattr(resolution_mod, "plan_resolution", lambda *a, **k: (Decision(valid_at=dt.date(2026, 3, 1)),
                                                                         tuple(queries)))
    req = SearchRequest(query=ACME_Q, top_k=4)
    for dense, want_calls in ((True, 2), (False, 1)):  # the agent's query, then one batch of both follow-ups
        emb = _CountingEmbedder()
        res = search(acme, STAFF, req, emb, SearchSettings(follow_up_dense=dense, graph_hops=0))
        assert emb.calls == want_calls and emb.texts == 1 + (len(queries) if dense else 0)
        note = next(st.note for st in res.stages if st.name == "resolve")
        assert "2 follow-up queries" in note, note
