import pytest

from quarry.core.records import Principal
from quarry.core.agent.runs import (
    BudgetExhausted,
    apply_search,
    finish,
    groups_hash,
    new_run,
    principal_key,
    record_fetch,
    record_results,
    reserve_search,
)

pytestmark = pytest.mark.unit

P = Principal(tenant="acme", subject="u1", groups=frozenset({"eng", "support"}))


def test_principal_key_binds_tenant_subject_and_exact_groups():
    same = Principal(tenant="acme", subject="u1", groups=frozenset({"support", "eng"}))
    assert principal_key(P) == principal_key(same)
    assert principal_key(P) != principal_key(Principal(tenant="globex", subject="u1", groups=P.groups))
    assert principal_key(P) != principal_key(Principal(tenant="acme", subject="u2", groups=P.groups))
    assert principal_key(P) != principal_key(Principal(tenant="acme", subject="u1", groups=frozenset({"eng"})))
    assert groups_hash(["a,b"]) != groups_hash(["a", "b"])
    assert "eng" not in principal_key(P)  # group names are hashed, not spelled out


def test_budget_of_three_with_new_evidence_each_time():
    s = new_run("r", P)
    assert s.searches_left == 3
    s, new = apply_search(s, ["a", "b"])
    assert new == {"a", "b"} and s.searches_left == 2
    s, new = apply_search(s, ["b", "c"])
    assert new == {"c"} and s.searches_left == 1
    s, new = apply_search(s, ["d"])
    assert new == {"d"} and s.searches_left == 0 and s.exhausted
    with pytest.raises(BudgetExhausted):
        apply_search(s, ["e"])


def test_search_without_new_ids_ends_budget():
    s = new_run("r", P)
    s, _ = apply_search(s, ["a", "b"])
    s, new = apply_search(s, ["b", "a"])
    assert new == frozenset() and s.exhausted and s.searches_left == 0
    with pytest.raises(BudgetExhausted):
        reserve_search(s)


def test_empty_first_search_leaves_one_rewrite_but_empty_second_ends():
    s = new_run("r", P)
    s, new = apply_search(s, [])
    assert not new and s.searches_left == 2
    s, new = apply_search(s, [])
    assert s.exhausted
    # strict mode: the rule also applies to the first search
    s2, _ = apply_search(new_run("r", P), [], first_search_exempt=False)
    assert s2.exhausted


def test_reserve_counts_before_results_so_failures_spend_the_slot():
    s = new_run("r", P, budget=2)
    s = reserve_search(s)  # the search then failed: no record_results
    s = reserve_search(s)
    assert s.searches_left == 0
    with pytest.raises(BudgetExhausted):
        reserve_search(s)
    s, _ = record_results(s, ["x"])
    assert s.exhausted


def test_fetch_ids_are_citable_and_finish_ends_everything():
    s = new_run("r", P)
    s, _ = apply_search(s, ["a"])
    s = record_fetch(s, ["z"])
    assert s.retrieved_ids == {"a", "z"} and s.seen_ids == {"a"}
    s = finish(s, "answered")
    assert s.finished and s.searches_left == 0 and s.outcome == "answered"
    with pytest.raises(BudgetExhausted):
        reserve_search(s)


def test_states_are_immutable_and_budget_validated():
    s = new_run("r", P)
    apply_search(s, ["a"])
    assert s.used == 0 and s.seen_ids == frozenset()
    with pytest.raises(ValueError):
        new_run("r", P, budget=0)


def test_store_decisions_apply_the_rules_once_and_report_what_changed():
    from quarry.core.agent.runs import decide_begin_answer, decide_fetch, decide_search, subject_of, tenant_of

    s = new_run("r1", P, budget=2)
    s, d = decide_search(s, ["a"])
    assert d.allowed and d.new_ids == ("a",) and d.view.searches_left == 1
    s, d = decide_search(s, ["b"])
    assert d.allowed and d.view.searches_left == 0
    done, d = decide_search(s, ["c"])
    assert not d.allowed and d.newly_finished and done.outcome == "budget_exhausted"
    assert "c" not in done.seen_ids  # a refused search's results are never recorded
    unchanged, d = decide_search(done, ["c"])
    assert unchanged is None and not d.newly_finished
    assert decide_fetch(done, ["x"])[0] is None  # nothing is recorded on a finished run
    assert not decide_begin_answer(done)[1].allowed
    fresh = new_run("r2", P)
    pending, start = decide_begin_answer(record_fetch(fresh, ["doc#p"]))
    assert start.allowed and start.retrieved_ids == ("doc#p",) and pending.finished
    assert set(start.view.model_dump()) == {"run_id", "budget", "used", "searches_left", "finished", "outcome", "seen"}
    key = principal_key(P)
    assert tenant_of(key) == "acme" and subject_of(key) == "acme/u1"
