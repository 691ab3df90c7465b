"""`quarry serve` / `quarry token` argument handling (no Ray started here)."""

from __future__ import annotations

import pytest

from quarry.cli import build_parser, main
from quarry.serve.http.auth import verify_token
from quarry.serve.serve_cmd import config_args
from quarry.serve.settings import AuthSettings, settings_from_args

pytestmark = pytest.mark.unit

SECRET = "cli-test-secret-0123456789-0123456789-0123456789-0123456789"


def test_token_roundtrips_through_the_servers_verifier(monkeypatch, capsys):
    monkeypatch.setenv("QUARRY_JWT_SECRET", SECRET)
    assert main(["token", "--tenant", "acme", "--subject", "alice", "--groups", "support, all-staff,",
                 "--scope", "operator", "--ttl", "60"]) == 0
    tok = capsys.readouterr().out.strip()
    ident = verify_token(tok, AuthSettings(hs256_secret=SECRET))
    assert ident.principal.tenant == "acme" and ident.principal.groups == {"support", "all-staff"}
    assert ident.is_operator


@pytest.mark.parametrize("argv", [
    ["--tenant", "Acme Corp", "--subject", "a", "--groups", "x"],
    ["--tenant", "acme", "--subject", "a", "--groups", "*"],
    ["--tenant", "acme", "--subject", "a", "--groups", "x", "--ttl", "0"],
])
def test_token_refuses_claims_the_server_would_reject(monkeypatch, capsys, argv):
    monkeypatch.setenv("QUARRY_JWT_SECRET", SECRET)
    assert main(["token", *argv]) == 2
    assert "error" in capsys.readouterr().err


def test_serve_arguments_and_config_file(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARRY_JWT_SECRET", SECRET)
    args = build_parser("serve").parse_args(["serve", "--index-root", "idx", "--config", "infra/serve/quarry-serve.yaml"])
    assert (args.host, args.port, args.address) == ("127.0.0.1", 8000, None)
    data = config_args(args.config)  # the Serve config file's application args
    # Replica counts are planned (quarry plan), not args: the deployments list becomes deployment_options.
    assert "gateway_replicas" not in data and data["run_budget"] == 3
    assert set(data["deployment_options"]) == {"Gateway", "Retriever", "Reranker", "Resolver"}
    assert all("autoscaling_config" in o for o in data["deployment_options"].values())
    s = settings_from_args({**data, "index_root": "/abs/idx"})
    assert s.index_root == "/abs/idx" and s.auth.algorithms == ("HS256",)
    flat = tmp_path / "flat.yaml"
    flat.write_text("top_k_ceiling: 5\nrun_budget: 2\n")
    assert config_args(str(flat)) == {"top_k_ceiling": 5, "run_budget": 2}


def test_serve_refuses_a_bad_config_without_starting_ray(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QUARRY_JWT_SECRET", SECRET)
    bad = tmp_path / "bad.yaml"
    bad.write_text("no_such_setting: 1\n")
    assert main(["serve", "--index-root", str(tmp_path), "--config", str(bad)]) == 2
    assert "no_such_setting" in capsys.readouterr().err
