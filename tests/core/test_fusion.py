import pytest

from quarry.core.search.fusion import rrf

pytestmark = pytest.mark.unit


def test_seed_003_worked_example():
    fused = dict(rrf([["P7", "P2", "P9"], ["P2", "P4", "P7"]]))
    assert [k for k, _ in rrf([["P7", "P2", "P9"], ["P2", "P4", "P7"]])] == ["P2", "P7", "P4", "P9"]
    assert round(fused["P2"] * 1000, 1) == 32.5
    assert round(fused["P7"] * 1000, 1) == 32.3
    assert round(fused["P4"] * 1000, 1) == 16.1
    assert round(fused["P9"] * 1000, 1) == 15.9


def test_seed_002_worked_example_ties_are_lexicographic():
    fused = rrf([["token-reset.md", "deploy.md", "errors.md"], ["deploy.md", "token-reset.md"]])
    assert [(k, round(v, 4)) for k, v in fused] == [
        ("deploy.md", 0.0325), ("token-reset.md", 0.0325), ("errors.md", 0.0159)]


def test_duplicate_in_one_list_votes_once():
    once = dict(rrf([["a", "b"], ["b"]]))
    dup = dict(rrf([["a", "b", "b", "a"], ["b"]]))
    assert once == dup


def test_ties_break_deterministically_by_best_rank_then_id():
    # 'z' holds rank 1 in one list; 'a' and 'z' tie on score but z ranked higher somewhere
    fused = rrf([["z", "a"], ["a", "z"]], k=60)
    assert [k for k, _ in fused] == ["a", "z"]  # equal best rank (1) -> id order
    fused = rrf([["z"], ["q"]], k=0)
    assert [k for k, _ in fused] == ["q", "z"]


def test_weights_and_validation():
    assert [k for k, _ in rrf([["a"], ["b"]], weights=[1.0, 2.0])] == ["b", "a"]
    with pytest.raises(ValueError):
        rrf([["a"]], k=-1)
    with pytest.raises(ValueError):
        rrf([["a"], ["b"]], weights=[1.0])
