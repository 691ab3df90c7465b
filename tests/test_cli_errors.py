"""Every `quarry` command answers a user mistake with one line on stderr and exit code 2,
never a traceback; an internal error is exit 1 with a short message (traceback only with
--debug). Walks each command's bad inputs in-process (no Ray or Spark is started: each
mistake is caught before anything heavy runs)."""

from __future__ import annotations

import pytest

from quarry.cli import COMMANDS, main

pytestmark = pytest.mark.unit



@pytest.fixture(scope="module")
def idx(tmp_path_factory, sample_docs):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path_factory.mktemp("cli-errors"))
    build_corpus([d for d in sample_docs if d.tenant == "acme"], root, HashingEmbedder())
    return root


def bad_inputs(idx: str, tmp: str, scifact: str = "") -> list[tuple[list[str], str]]:
    """(argv, a phrase the one-line message must contain)."""
    return [
        (["nosuchcommand"], "invalid choice"),
        (["search"], "required"),
        (["search", "--index-root", idx, "--tenant", "acme", "--top-k", "50", "x"], "--top-k 50 is out of range"),
        (["search", "--index-root", idx, "--tenant", "acme", "--top-k", "many", "x"], "invalid int value"),
        (["search", "--index-root", idx, "--tenant", "acme", "--valid-at", "2026-13-01", "x"], "error"),
        (["search", "--index-root", idx, "--tenant", "nobody", "x"], "error"),
        (["build", "--source", f"{tmp}/missing", "--index-root", f"{tmp}/out"], "no such file"),
        (["build", "--source", f"{tmp}/missing"], "--index-root is required (or set QUARRY_INDEX_ROOT)"),
        (["eval", "beir", tmp, "--index-root", f"{tmp}/b"], "not a BEIR dataset"),
        (["eval", "beir", scifact, "--index-root", f"{tmp}/b", "--split", "dev"], "no qrels/dev.tsv"),
        (["eval", "beir", scifact, "--index-root", f"{tmp}/b", "--train-split", "test"], "never be 'test'"),
        (["eval", "beir", scifact, "--index-root", f"{tmp}/b", "--check", f"{tmp}/none.json"],
         "no pinned expectations"),
        (["eval"], "required"),
        (["serve", "--index-root", f"{tmp}/missing"], "does not exist"),
        (["serve", "--index-root", idx, "--config", f"{tmp}/missing.yaml"], "No such file"),
        (["token", "--tenant", "Bad Tenant", "--subject", "s", "--groups", "g"], "slug"),
        (["token", "--tenant", "acme", "--subject", "s", "--groups", "*"], "wildcard"),
        (["train-ranker", "--index-root", idx, "--tenant", "acme"], "required"),
        (["demo", "--bogus"], "unrecognized arguments"),
        (["plan"], "required: --profile"),
        (["plan", "--profile", f"{tmp}/missing.yaml"], "cannot read profile"),
        (["status", "--index-root", f"{tmp}/missing"], "no published index"),
        (["compact", "--tenant", "acme", "--index-root", f"{tmp}/missing"], "no published index"),
        (["apply-changes", "--changes", f"{tmp}/missing", "--index-root", idx], "no such file"),
        (["reconcile", "--source", f"{tmp}/missing", "--index-root", idx], "no such file"),
        (["purge", "--index-root", idx, "--tenant", "nobody", "--doc-id", "d"], "no published index"),
        (["purge", "--index-root", idx, "--tenant", "nobody", "--all"], "no data for tenant"),
        (["purge", "--index-root", idx, "--tenant", "acme", "--all", "--version", "2"], "--version needs --doc-id"),
        (["purge", "--index-root", idx, "--tenant", "acme"], "one of the arguments --doc-id --all is required"),
        (["gc", "--index-root", idx, "--tenant", "nobody"], "no published index"),
        (["gc", "--index-root", idx, "--all", "--retain-generations", "0"], "at least 1"),
        (["rollback", "--index-root", idx, "--tenant", "nobody", "--generation", "1"], "tenant 'nobody' not found"),
        (["rollback", "--index-root", idx, "--tenant", "acme", "--generation", "99"], "gen-99 does not exist"),
        (["demo", "--embedder", f"{tmp}/no-model", "--build", "in-process", "--index-root", f"{tmp}/d"],
         "not a local model directory"),
    ]


def test_every_command_has_a_bad_input_case(idx, tmp_path):
    walked = {argv[0] for argv, _ in bad_inputs(idx, str(tmp_path))}
    assert set(COMMANDS) <= walked, f"no bad-input case for {set(COMMANDS) - walked}"


def test_each_mistake_is_one_line_and_exit_2(idx, tmp_path, capsys, scifact_dir):
    for argv, phrase in bad_inputs(idx, str(tmp_path), str(scifact_dir)):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's own exit
            code = e.code
        err = capsys.readouterr().err.strip()
        assert code == 2, (argv, code, err)
        assert "Traceback" not in err, (argv, err)
        assert len(err.splitlines()) == 1, (argv, err)
        assert phrase in err, (argv, err)


def test_an_internal_error_is_exit_1_with_a_short_message(monkeypatch, capsys):
    import quarry.search_cmd as cmd

    def boom(args):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(cmd, "run", boom)
    assert main(["search", "--index-root", "x", "--tenant", "t", "q"]) == 1
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: disk on fire" in err and "--debug" in err and "Traceback" not in err
    assert main(["--debug", "search", "--index-root", "x", "--tenant", "t", "q"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_a_missing_extra_imported_inside_run_gets_the_install_hint(monkeypatch, capsys):
    import quarry.search_cmd as cmd

    def needs_spark(args):
        raise ModuleNotFoundError("No module named 'pyspark'", name="pyspark")

    monkeypatch.setattr(cmd, "run", needs_spark)
    assert main(["search", "--index-root", "x", "--tenant", "t", "q"]) == 2
    err = capsys.readouterr().err
    assert "needs the 'spark' extra" in err and "pip install" in err


@pytest.mark.parametrize("argv, module, name", [
    (["compact", "--tenant", "acme", "--index-root", "{idx}"], "quarry.jobs.compact", "compact_tenant"),
    (["reconcile", "--source", "{tmp}", "--index-root", "{idx}", "--apply", "in-process"], "quarry.jobs.reconcile",
     "reconcile"),
    (["build", "--source", "{tmp}", "--index-root", "{tmp}/out"], "quarry.build_cmd", "run_build"),
    (["status", "--index-root", "{idx}"], "quarry.status_cmd", "tenant_status"),
])
def test_a_bug_inside_a_command_is_exit_1_with_a_traceback_under_debug(idx, tmp_path, monkeypatch, capsys,
                                                                        argv, module, name):
    """No command reports its own errors: a RuntimeError (a bug) raised inside one is never a
    user mistake (exit 2); it goes through the one reporter, which shows the traceback with --debug."""
    import importlib

    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(importlib.import_module(module), name, boom)
    argv = [a.format(idx=idx, tmp=tmp_path) for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: disk on fire" in err and "Traceback" not in err
    assert main(["--debug", *argv]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "disk on fire" in err
