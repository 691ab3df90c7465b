"""`quarry plan`: JSON and table output, the generated Serve config against Ray's own schema,
the RayService against KubeRay's CRD schema, the checked-in files against a fresh
regeneration, --from-traces, and bad input."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from quarry.cli import main
from quarry.plan_manifests import validate_rayservice, validate_serve_config

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "infra" / "profiles" / "seed-11-5.yaml"
LOCAL = ROOT / "infra" / "profiles" / "quarry-local.yaml"


def plan(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["plan", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_seed_json_prints_every_worked_number(capsys):
    rc, out, _ = plan(capsys, "--profile", str(SEED), "--json")
    assert rc == 0
    e = json.loads(out)["p50"]  # one JSON object
    assert {k: e[k] for k in ("reranker_token_units", "delivered_tokens", "narrow_token_turns", "wide_token_turns",
                              "avoided_token_turns", "calls_per_day", "avoided_token_turns_per_day",
                              "reranker_token_units_per_day")} == {
        "reranker_token_units": 8_800, "delivered_tokens": 2_600, "narrow_token_turns": 15_600,
        "wide_token_turns": 42_000, "avoided_token_turns": 26_400, "calls_per_day": 18_000,
        "avoided_token_turns_per_day": 475_200_000, "reranker_token_units_per_day": 158_400_000}
    assert e["one_turn"] == {"wide_tokens": 7_000, "narrow_tokens": 2_600, "reduction": 4_400,
                             "reranker_token_units": 8_800, "reranking_pays": True}
    assert (e["calls_per_task"], e["calls_per_task_target"], e["calls_fall"]) == (1.6, 1.3, 0.1875)
    assert (e["pass_ms"], e["expected_latency_ms"], e["expected_latency_target_ms"]) == (2_080, 2_704, 2_392)
    assert (e["rerank_halving_saving_ms"], e["repeat_halving_saving_ms"]) == (136.5, 312)
    assert (e["active_paths"], e["active_paths_target"]) == (67.6, 59.8)
    assert isinstance(e["reranker_token_units"], int)  # 8800, not 8800.0


def test_table_names_each_figure(capsys):
    rc, out, _ = plan(capsys, "--profile", str(SEED))
    assert rc == 0
    assert "475,200,000" in out and "158,400,000" in out and "67.6" in out
    for name in ("Gateway", "Retriever", "Reranker"):
        assert name in out


def test_serve_config_validates_with_rays_schema_and_autoscales_everything(capsys, tmp_path):
    out = tmp_path / "serve.yaml"
    rc, _, _ = plan(capsys, "--profile", str(LOCAL), "--out", str(out))
    assert rc == 0
    cfg = yaml.safe_load(out.read_text())
    validate_serve_config(cfg)
    from ray.serve.schema import ServeApplicationSchema

    app = ServeApplicationSchema.model_validate(cfg["applications"][0])
    assert {d.name for d in app.deployments} == {"Gateway", "Retriever", "Reranker", "Resolver"}
    for d in cfg["applications"][0]["deployments"]:
        a = d["autoscaling_config"]
        assert "num_replicas" not in d
        assert a["upscale_delay_s"] >= a["look_back_period_s"] and a["downscale_delay_s"] >= a["look_back_period_s"]
        assert d["max_ongoing_requests"] >= a["target_ongoing_requests"]
    assert not any(k.endswith("_replicas") for k in cfg["applications"][0]["args"])


def test_ray_schema_rejects_a_broken_config(capsys, tmp_path):
    from pydantic import ValidationError

    out = tmp_path / "serve.yaml"
    plan(capsys, "--profile", str(LOCAL), "--out", str(out))
    cfg = yaml.safe_load(out.read_text())
    cfg["applications"][0]["deployments"][0]["num_replicas"] = 2  # with autoscaling_config: refused
    with pytest.raises(ValidationError, match="num_replicas"):
        validate_serve_config(cfg)


def test_rayservice_validates_against_the_kuberay_crd_schema(capsys, tmp_path):
    out = tmp_path / "rs.yaml"
    rc, _, _ = plan(capsys, "--profile", str(SEED), "--rayservice", str(out))
    assert rc == 0
    m = yaml.safe_load(out.read_text())
    validate_rayservice(m)
    groups = {g["groupName"]: g for g in m["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    assert set(groups) == {"cpu", "gpu"}  # the seed's reranker asks for a GPU
    assert groups["gpu"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    embedded = yaml.safe_load(m["spec"]["serveConfigV2"])
    validate_serve_config(embedded)
    broken = copy.deepcopy(m)
    del broken["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["maxReplicas"]
    with pytest.raises(jsonschema.ValidationError, match="maxReplicas"):
        validate_rayservice(broken)
    broken = copy.deepcopy(m)
    broken["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["minReplicas"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        validate_rayservice(broken)


@pytest.mark.parametrize("checked_in, flag", [("infra/serve/quarry-serve.yaml", "--out"),
                                              ("infra/kuberay/rayservice.yaml", "--rayservice")])
def test_checked_in_configs_are_what_quarry_plan_generates(capsys, tmp_path, monkeypatch, checked_in, flag):
    monkeypatch.chdir(ROOT)  # the header records the relative profile path
    out = tmp_path / "regen.yaml"
    assert plan(capsys, "--profile", "infra/profiles/quarry-local.yaml", flag, str(out))[0] == 0
    assert (ROOT / checked_in).read_text() == out.read_text(), (
        f"{checked_in} is stale: regenerate it with quarry plan --profile infra/profiles/quarry-local.yaml {flag} {checked_in}")


def test_quarry_serve_config_applies_the_planned_autoscaling():
    """`quarry serve --config` reads the generated file; the app builder then carries the
    planned options (Ray's own builder, no cluster needed)."""
    from ray.serve._private.build_app import build_app as ray_build

    from quarry.serve.app import build_app
    from quarry.serve.serve_cmd import config_args

    args = {**config_args(str(ROOT / "infra/serve/quarry-serve.yaml")), "jwt_secret": "s" * 40}
    planned = {d["name"]: d for d in yaml.safe_load((ROOT / "infra/serve/quarry-serve.yaml").read_text())
               ["applications"][0]["deployments"]}
    built = {d.name: d for d in ray_build(build_app(args), name="quarry").deployments}
    assert set(built) == set(planned)
    for name, d in built.items():
        a = d._deployment_config.autoscaling_config
        assert a is not None, name
        assert (a.min_replicas, a.max_replicas) == (planned[name]["autoscaling_config"]["min_replicas"],
                                                    planned[name]["autoscaling_config"]["max_replicas"])
        assert d._deployment_config.max_ongoing_requests == planned[name]["max_ongoing_requests"]


def test_from_traces_fills_distributions_from_jsonl_and_parquet(capsys, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for i in range(40):
        rows.append({"kind": "search", "run_id": f"r{i // 2}", "candidates": [{"passage_id": f"p{j}"} for j in range(30 + i % 5)],
                     "delivered_tokens": 100 + 10 * i, "stages": [{"name": "rerank", "kept": 4}],
                     "server_timing": f"auth;dur=0.3, retrieve;dur={20 + i % 7}.0, total;dur={50 + i}.0"})
    rows.append({"kind": "answer", "run_id": "r0"})  # not a search: ignored
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:20]) + "\n")
    tail = [{**r, "candidates": len(r["candidates"]) if "candidates" in r else None} for r in rows[20:]]
    pq.write_table(pa.Table.from_pylist(tail), tmp_path / "b.parquet")
    rc, out, err = plan(capsys, "--profile", str(LOCAL), "--from-traces", str(tmp_path), "--json")
    assert rc == 0, err
    p = json.loads(out)
    # 40 searches over 20 runs -> 2 calls per task; delivered 100..490 -> p50 295
    assert p["p50"]["peak_calls_per_s"] == 12 * 2
    assert p["p50"]["delivered_tokens"] == 295
    assert p["p95"]["delivered_tokens"] == pytest.approx(100 + 10 * 39 * 0.95, abs=1e-6)
    assert p["deployments"][0]["name"] == "Gateway" and p["deployments"][0]["peak_requests_per_s"] == 24


def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path):
    rc, _, err = plan(capsys, "--profile", str(tmp_path / "missing.yaml"))
    assert rc == 2 and err.count("\n") == 1 and "cannot read profile" in err
    bad = tmp_path / "bad.yaml"
    data = yaml.safe_load(SEED.read_text())
    data["recovery"]["repeat_rate"] = 1.4
    bad.write_text(yaml.safe_dump(data))
    rc, _, err = plan(capsys, "--profile", str(bad))
    assert rc == 2 and "recovery.repeat_rate" in err and "Traceback" not in err
    rc, _, err = plan(capsys, "--profile", str(SEED), "--from-traces", str(tmp_path / "none"))
    assert rc == 2 and "no trace file" in err


def _walk(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,), k, v
            yield from _walk(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, path + (i,))


def _env(container) -> dict:
    return {e["name"]: e for e in container.get("env", [])}


@pytest.mark.parametrize("manifest", ["infra/kuberay/rayservice.yaml", "infra/spark/sparkapplication.yaml"])
def test_cluster_manifests_mount_nothing_node_local_and_read_storage_from_config_and_secrets(manifest):
    m = yaml.safe_load((ROOT / manifest).read_text())
    assert not [p for p, k, _ in _walk(m) if k == "hostPath"], "a cluster manifest must not mount node-local disk"
    if m["kind"] == "RayService":
        validate_rayservice(m)
        spec = m["spec"]["rayClusterConfig"]
        containers = [c for g in [spec["headGroupSpec"], *spec["workerGroupSpecs"]] for c in g["template"]["spec"]["containers"]]
        app = yaml.safe_load(m["spec"]["serveConfigV2"])["applications"][0]["args"]
        assert not {"index_root", "state_dir", "trace_dir"} & set(app) and app["run_store"] == "redis"
        assert not [p for p, k, _ in _walk(spec) if k in ("volumes", "volumeMounts")]
    else:
        assert "--index-root" not in m["spec"]["arguments"]  # from the environment, like the credentials
        containers = [m["spec"]["driver"], m["spec"]["executor"]]
    for c in containers:
        env = _env(c)
        assert env["QUARRY_INDEX_ROOT"]["valueFrom"]["configMapKeyRef"]["key"] == "index_root"
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert "secretKeyRef" in env[k]["valueFrom"] and "value" not in env[k]
        if m["kind"] == "RayService":
            assert "secretKeyRef" in env["QUARRY_REDIS_URL"]["valueFrom"]


def test_the_rayservice_serve_args_plus_its_environment_make_valid_settings(monkeypatch):
    """What a replica builds from the embedded config and the env the Secrets fill in: an
    s3:// root with traces under it and runs in Redis (the validator refuses the actor store)."""
    from quarry.serve.settings import settings_from_args

    m = yaml.safe_load((ROOT / "infra/kuberay/rayservice.yaml").read_text())
    args = yaml.safe_load(m["spec"]["serveConfigV2"])["applications"][0]["args"]
    monkeypatch.setenv("QUARRY_INDEX_ROOT", "s3://quarry-indexes/prod")
    monkeypatch.setenv("QUARRY_REDIS_URL", "redis://:pw@redis:6379/0")
    s = settings_from_args({**args, "jwt_secret": "s" * 40})
    assert (s.index_root, s.run_store, s.redis_url) == ("s3://quarry-indexes/prod", "redis", "redis://:pw@redis:6379/0")
    assert s.trace_root == "s3://quarry-indexes/prod/_traces"
    monkeypatch.delenv("QUARRY_REDIS_URL")
    actor = settings_from_args({**args, "jwt_secret": "s" * 40, "run_store": "actor"})
    assert actor.run_state_dir == "s3://quarry-indexes/prod/_serve/runs"  # the actor's checkpoint: on the root too
def test_tenants_sized_by_memory_and_littles_law(capsys):
    rc, out, _ = plan(capsys, "--profile", str(LOCAL), "--json", "--tenants", "10000", "--working-set", "2000",
                      "--index-bytes-per-tenant", "20MiB", "--replica-memory", "16GiB")
    assert rc == 0
    t = json.loads(out)["tenants"]
    assert t["tenants_hot_per_replica"] == 578 and t["working_set_fits_each_replica"] is False
    assert t["replicas_if_partitioned"] == 4
    assert t["retriever_replicas"] == max(4, t["retriever_replicas_littles_law"])
    rc, out, _ = plan(capsys, "--profile", str(LOCAL), "--tenants", "10000", "--working-set", "200",
                      "--index-bytes-per-tenant", "20MiB", "--replica-memory", "16GiB")
    assert rc == 0 and "holds 578 tenants hot" in out and "working set fits each replica: yes" in out


def test_tenants_measured_from_an_index_root(capsys, tmp_path):
    from quarry.core.index import layout

    root = tmp_path / "idx"
    for tenant, size in (("a", 1000), ("b", 3000)):
        gen = layout.generation_dir(str(root), tenant, 1)
        shard = Path(layout.shard_dir(str(root), tenant, 1, 0))
        shard.mkdir(parents=True)
        (shard / "dense.faiss").write_bytes(b"x" * size)
        Path(gen, "manifest.json").write_text("{}")  # not a shard file: not counted
        Path(layout.tenant_dir(str(root), tenant), "CURRENT").write_text("gen-1")
    rc, out, _ = plan(capsys, "--profile", str(LOCAL), "--json", "--working-set", "2", "--index-root", str(root),
                      "--replica-memory", "2GiB")
    assert rc == 0
    t = json.loads(out)["tenants"]
    assert t["tenants"] == 2 and t["index_bytes_per_tenant"] == 3000 and t["measured_from"] == str(root)


@pytest.mark.parametrize("argv, msg", [
    (["--tenants", "10"], "tenant sizing needs --working-set"),
    (["--tenants", "10", "--working-set", "2", "--index-bytes-per-tenant", "big", "--replica-memory", "1GiB"],
     "is not a size"),
    (["--tenants", "10", "--working-set", "20", "--index-bytes-per-tenant", "1MiB", "--replica-memory", "1GiB"],
     "exceeds the tenant count"),
])
def test_tenant_options_bad_input_exit_2(capsys, argv, msg):
    rc, _, err = plan(capsys, "--profile", str(LOCAL), *argv)
    assert rc == 2 and msg in err
