"""The deployable files a capacity plan produces: a Ray Serve config (``serve deploy`` /
``serve run`` / ``quarry serve --config``) and a KubeRay ``RayService`` manifest. Plain dicts;
writing YAML and validating against Ray's and KubeRay's schemas happen in the callers/tests."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from quarry.core.capacity.workload import CapacityPlan, WorkloadProfile
from quarry.serve.launch import DIRECT_INGRESS_DRAIN, throughput_env

IMPORT_PATH = "quarry.serve.app:build_app"
APP_NAME = "quarry"
RAYSERVICE_SCHEMA = Path(__file__).resolve().parents[1] / "infra" / "kuberay" / "rayservice.v1.schema.json"


def serve_config(plan: CapacityPlan, profile: WorkloadProfile, *, host: str = "0.0.0.0", port: int = 8000) -> dict[str, Any]:
    """A Serve config whose every deployment autoscales with the planned settings. The
    application's own args come from the profile's ``app_args``; the reranker args follow
    the plan (deployed or not, its GPUs and batch size)."""
    args = dict(profile.app_args)
    rr = next((d for d in plan.deployments if d.name == "Reranker"), None)
    args["reranker_enabled"] = rr is not None
    if rr is not None:
        args.update(reranker_num_cpus=rr.num_cpus, reranker_num_gpus=rr.num_gpus)
        if rr.batch_size:
            args["reranker_batch_size"] = rr.batch_size
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": host, "port": port},
        "applications": [{
            "name": APP_NAME, "route_prefix": "/", "import_path": IMPORT_PATH, "args": args,
            "deployments": [d.serve_options() for d in plan.deployments],
        }],
    }


def _workers(demand: float, per_worker: float) -> int:
    return math.ceil(round(demand / per_worker, 6)) if demand > 0 else 0


def _qty(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


# What a cluster must not take from the profile: paths on one machine's disk. On a cluster the
# index root (an s3:// URI; traces live under it) comes from a ConfigMap, runs go to Redis
# (its URL, with credentials, from a Secret) and object-store credentials from a Secret
# (optional: an IAM role for the service account serves as well). No volume is mounted.
NODE_LOCAL_ARGS = ("index_root", "state_dir", "trace_dir")
CONFIG_MAP, S3_SECRET, REDIS_SECRET = "quarry-config", "quarry-s3", "quarry-redis"


def _ref(kind: str, name: str, key: str, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name, "key": key}
    if optional:
        ref["optional"] = True
    return {"valueFrom": {kind: ref}}


def _storage_env() -> list[dict[str, Any]]:
    return [
        {"name": "QUARRY_INDEX_ROOT", **_ref("configMapKeyRef", CONFIG_MAP, "index_root")},
        {"name": "FSSPEC_S3_ENDPOINT_URL", **_ref("configMapKeyRef", CONFIG_MAP, "s3_endpoint_url", optional=True)},
        {"name": "AWS_DEFAULT_REGION", **_ref("configMapKeyRef", CONFIG_MAP, "aws_region", optional=True)},
        {"name": "AWS_ACCESS_KEY_ID", **_ref("secretKeyRef", S3_SECRET, "access_key_id", optional=True)},
        {"name": "AWS_SECRET_ACCESS_KEY", **_ref("secretKeyRef", S3_SECRET, "secret_access_key", optional=True)},
        {"name": "QUARRY_REDIS_URL", **_ref("secretKeyRef", REDIS_SECRET, "url")},
    ]


def cluster_serve_config(serve_cfg: dict[str, Any]) -> dict[str, Any]:
    """The Serve config as a cluster runs it: no node-local path args (they come from the
    environment, :func:`_storage_env`) and runs in Redis."""
    import copy

    cfg = copy.deepcopy(serve_cfg)
    for app in cfg["applications"]:
        args = {k: v for k, v in app["args"].items() if k not in NODE_LOCAL_ARGS}
        args["run_store"] = "redis"
        app["args"] = args
    return cfg


def _container(name: str, image: str, cpus: float, memory: str, gpus: int = 0) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": _qty(cpus), "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    # Replicas read the HS256 key from the environment; on Kubernetes it comes from a Secret.
    env = [{"name": "QUARRY_JWT_SECRET", "valueFrom": {"secretKeyRef": {"name": "quarry-jwt", "key": "secret"}}}]
    env += _storage_env()
    # Ray Serve's throughput-optimized mode, as `quarry serve` runs it (ServeSettings.throughput_optimized),
    # except that a Gateway replica drains as long as Ray's default: a cluster has a load balancer in front
    env += [{"name": k, "value": v} for k, v in {**throughput_env(), DIRECT_INGRESS_DRAIN: "30"}.items()]
    return {"name": name, "image": image, "env": env, "resources": {"limits": limits, "requests": dict(limits)}}


def rayservice(plan: CapacityPlan, profile: WorkloadProfile, serve_cfg: dict[str, Any], *,
               name: str = "quarry") -> dict[str, Any]:
    """A RayService: head (no Serve replicas), a CPU worker group sized for the CPU-only
    deployments, and a GPU group when any deployment asks for GPUs. Storage and run state
    come from a ConfigMap and Secrets through the environment (:func:`cluster_serve_config`). Group bounds are the
    planned min/max replica demand packed onto the profile's worker shape."""
    c = profile.cluster
    cpu_min = sum(d.min_replicas * d.num_cpus for d in plan.deployments if not d.num_gpus)
    cpu_max = sum(d.max_replicas * d.num_cpus for d in plan.deployments if not d.num_gpus)
    gpu_min = sum(d.min_replicas * d.num_gpus for d in plan.deployments if d.num_gpus)
    gpu_max = sum(d.max_replicas * d.num_gpus for d in plan.deployments if d.num_gpus)
    groups = [{
        "groupName": "cpu",
        "replicas": max(1, _workers(cpu_min, c.cpu_worker_cpus)),
        "minReplicas": max(1, _workers(cpu_min, c.cpu_worker_cpus)),
        "maxReplicas": max(1, _workers(cpu_max, c.cpu_worker_cpus)),
        "rayStartParams": {},
        "template": {"spec": {"containers": [_container("ray-worker", c.image, c.cpu_worker_cpus, c.cpu_worker_memory)]}},
    }]
    if gpu_max:
        groups.append({
            "groupName": "gpu",
            "replicas": _workers(gpu_min, c.gpu_worker_gpus),
            "minReplicas": _workers(gpu_min, c.gpu_worker_gpus),
            "maxReplicas": _workers(gpu_max, c.gpu_worker_gpus),
            "rayStartParams": {},
            "template": {"spec": {"containers": [_container("ray-worker", c.image, c.gpu_worker_cpus,
                                                            c.gpu_worker_memory, c.gpu_worker_gpus)]}},
        })
    import yaml

    head = _container("ray-head", c.image, c.head_cpus, c.head_memory)
    head["ports"] = [{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"},
                     {"containerPort": 10001, "name": "client"}, {"containerPort": 8000, "name": "serve"}]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "quarry",
                                              "quarry.dev/profile": plan.profile}},
        "spec": {
            "serveConfigV2": yaml.safe_dump(cluster_serve_config(serve_cfg), sort_keys=False),
            "rayClusterConfig": {
                "rayVersion": c.ray_version,
                # Serve's autoscaler asks for replicas; the in-tree Ray autoscaler adds the
                # worker pods they need, within each group's bounds.
                "enableInTreeAutoscaling": True,
                # num-cpus 0 keeps Serve replicas off the head pod.
                "headGroupSpec": {"rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
                                  "template": {"spec": {"containers": [head]}}},
                "workerGroupSpecs": groups,
            },
        },
    }


def dump_yaml(data: dict[str, Any], header: str = "") -> str:
    """YAML with multi-line strings (the RayService's embedded Serve config) as literal blocks."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(d: yaml.SafeDumper, v: str) -> yaml.Node:
        return d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None)

    _Dumper.add_representer(str, _str)
    return header + yaml.dump(data, Dumper=_Dumper, sort_keys=False)


def validate_rayservice(manifest: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``manifest`` satisfies the vendored
    KubeRay RayService CRD schema (see infra/kuberay/vendor_crd_schema.py)."""
    import json

    import jsonschema

    jsonschema.validate(manifest, json.loads(RAYSERVICE_SCHEMA.read_text()))


def validate_serve_config(cfg: dict[str, Any]) -> None:
    """Raise ``pydantic.ValidationError`` unless Ray's own Serve schema accepts ``cfg``."""
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(cfg)
