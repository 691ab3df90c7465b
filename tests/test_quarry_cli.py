"""The `quarry` command line: help lists every command; `quarry search` prints cited
results as a principal and refuses bad input with exit code 2."""

from __future__ import annotations

import json

import pytest

from quarry.cli import COMMANDS, main

pytestmark = pytest.mark.unit


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.fixture(scope="module")
def hashed_root(tmp_path_factory, sample_docs):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path_factory.mktemp("cli-index"))
    build_corpus([d for d in sample_docs if d.tenant == "acme"], root, HashingEmbedder())
    return root


def test_search_prints_cited_results_for_the_principal(hashed_root, capsys):
    assert main(["search", "--index-root", hashed_root, "--tenant", "acme", "--groups", "all-staff",
                 "--top-k", "2", "E-4471"]) == 0
    out = capsys.readouterr().out
    assert "ticket-517@" in out and "stages:" in out and "decision (valid at " in out and "  governing   " in out
    assert main(["search", "--index-root", hashed_root, "--tenant", "acme", "--groups", "all-staff",
                 "--json", "treasury account details IBAN"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert {"governing", "supporting", "rejected", "unresolved", "related"} <= set(res["decision"]) and all(e["verdict"] for e in res["excerpts"])
    assert all(e["doc_id"] != "treasury-accounts" for e in res["excerpts"])  # finance-admins only
    assert main(["search", "--index-root", hashed_root, "--tenant", "acme", "--groups", "finance-admins",
                 "--json", "treasury account details IBAN"]) == 0
    assert json.loads(capsys.readouterr().out)["excerpts"][0]["doc_id"] == "treasury-accounts"


@pytest.mark.parametrize("argv", [
    ["--valid-at", "2026-13-01", "x"],
    ["--top-k", "0", "x"],
    ["   "],
])
def test_search_bad_input_exits_2(hashed_root, argv, capsys):
    assert main(["search", "--index-root", hashed_root, "--tenant", "acme", *argv]) == 2
    assert "error" in capsys.readouterr().err


def test_search_unknown_tenant_exits_2(hashed_root, capsys):
    assert main(["search", "--index-root", hashed_root, "--tenant", "nobody", "x"]) == 2


def test_eval_beir_rejects_a_folder_that_is_not_beir(tmp_path, capsys):
    assert main(["eval", "beir", str(tmp_path), "--index-root", str(tmp_path / "idx")]) == 2
    assert "not a BEIR dataset" in capsys.readouterr().err
