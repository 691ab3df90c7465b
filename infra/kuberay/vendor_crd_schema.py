"""Regenerate ``rayservice.v1.schema.json`` from KubeRay's RayService CRD (no network).

No PyPI package ships KubeRay's CRDs, so the ``v1`` ``openAPIV3Schema`` of
``ray-operator/config/crd/bases/ray.io_rayservices.yaml`` (github.com/ray-project/kuberay,
Apache-2.0) is vendored, pruned to stay small: ``status`` and every ``description`` are dropped, and each embedded
Kubernetes PodTemplateSpec keeps only what a manifest here sets (container name, image,
resources, ports, env); its other fields are left open
(``x-kubernetes-preserve-unknown-fields``) instead of being checked.

    python infra/kuberay/vendor_crd_schema.py path/to/ray.io_rayservices.yaml [kuberay-commit]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).with_name("rayservice.v1.schema.json")
CONTAINER_KEEP = ("name", "image", "resources", "ports", "env", "imagePullPolicy")


def _prune_template(t: dict[str, Any]) -> dict[str, Any]:
    pod = t["properties"]["spec"]
    containers = pod["properties"]["containers"]
    item = containers["items"]
    item = {**item, "properties": {k: item["properties"][k] for k in CONTAINER_KEEP},
            "x-kubernetes-preserve-unknown-fields": True}
    spec = {"type": "object", "required": pod.get("required", []),
            "properties": {"containers": {**containers, "items": item}},
            "x-kubernetes-preserve-unknown-fields": True}
    return {"type": "object", "properties": {"metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                             "spec": spec}}


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def prune(schema: dict[str, Any]) -> dict[str, Any]:
    schema = _strip_descriptions(schema)
    schema["properties"].pop("status", None)
    rcc = schema["properties"]["spec"]["properties"]["rayClusterConfig"]["properties"]
    rcc["headGroupSpec"]["properties"]["template"] = _prune_template(rcc["headGroupSpec"]["properties"]["template"])
    wg = rcc["workerGroupSpecs"]["items"]["properties"]
    wg["template"] = _prune_template(wg["template"])
    return schema


def main(crd_path: str, commit: str = "unknown") -> None:
    crd = yaml.safe_load(Path(crd_path).read_text())
    v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    out = {"$comment": f"Pruned from KubeRay ray-operator/config/crd/bases/ray.io_rayservices.yaml "
                       f"(github.com/ray-project/kuberay, commit {commit}, Apache-2.0) by vendor_crd_schema.py",
           **prune(v1["schema"]["openAPIV3Schema"])}
    OUT.write_text(json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(*sys.argv[1:])
