"""``quarry build``: the command line of the PySpark build job (``quarry.jobs.build``).

It lives above jobs and evaluation because ``--gate-cases`` composes the two: the build
job publishes through the evidence-case gate of ``quarry.eval.case_gate`` without importing
evaluation code itself. Errors are reported by the one CLI error path (``quarry.cli``).
"""

from __future__ import annotations

import argparse
import json
import os

from pydantic import SecretStr

from quarry.core.errors import UsageError
from quarry.core.ingest.contextualize import LLMSettings
from quarry.eval.case_gate import case_gate
from quarry.eval.case_model import CaseError, load_cases
from quarry.jobs.build import run_build
from quarry.jobs.build_settings import BuildSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", required=True, help="JSONL/Parquet file or folder, or a Markdown folder")
    p.add_argument("--index-root", default=os.environ.get("QUARRY_INDEX_ROOT"),
                   help="local path or fsspec URI (s3://bucket/prefix); default $QUARRY_INDEX_ROOT")
    p.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--tenants", default=None, help="comma-separated tenants to build (default: all)")
    p.add_argument("--shard-docs", type=int, default=50_000, help="documents per shard (default 50000)")
    p.add_argument("--contextualizer", choices=("extractive", "llm", "none"), default="extractive")
    g = p.add_argument_group("llm contextualizer (an OpenAI-compatible endpoint)")
    g.add_argument("--llm-url", help="base URL before /chat/completions, e.g. http://vllm:8000/v1")
    g.add_argument("--llm-model", help="served model name")
    g.add_argument("--llm-api-key-env", help="environment variable holding the API key")
    g.add_argument("--llm-price-in", type=float, default=0.0, help="currency per 1k input tokens")
    g.add_argument("--llm-price-out", type=float, default=0.0, help="currency per 1k output tokens")
    g.add_argument("--llm-concurrency", type=int, default=4, help="requests in flight per Python worker")
    p.add_argument("--embedder", default="default",
                   help="'default' (packaged all-MiniLM-L6-v2), 'hashing[:dim]', or a local model directory")
    p.add_argument("--batch-size", type=int, default=64, help="embedding batch size")
    p.add_argument("--chunk-tokens", type=int, default=200, help="max tokens per passage where structure allows (default 200)")
    p.add_argument("--partitions", type=int, default=None, help="partitions for the wide stages (default 2x cores, raised to records / 20,000)")
    p.add_argument("--no-publish", action="store_true", help="build and verify, but leave CURRENT alone")
    p.add_argument("--gate-cases", default=None, metavar="DIR",
                   help="publish a tenant's new generation only if its evidence cases in DIR hold isolation and "
                        "resolution accuracy and candidate recall are no worse than on the live generation")
    p.add_argument("--report", dest="report_path", default=None, help="also write the run report JSON here")
    p.add_argument("--json", action="store_true", help="print the run report as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def settings_from_args(args: argparse.Namespace) -> BuildSettings:
    llm = None
    key = None
    if args.contextualizer == "llm":
        if not args.llm_url or not args.llm_model:
            raise UsageError("--contextualizer llm needs --llm-url and --llm-model")
        llm = LLMSettings(base_url=args.llm_url, model=args.llm_model, api_key_env=args.llm_api_key_env,
                          price_in_per_1k=args.llm_price_in, price_out_per_1k=args.llm_price_out,
                          max_concurrency=args.llm_concurrency)
        if args.llm_api_key_env:
            val = os.environ.get(args.llm_api_key_env)
            if not val:
                raise UsageError(f"--llm-api-key-env {args.llm_api_key_env}: the variable is not set")
            key = SecretStr(val)
    if not args.index_root:
        raise UsageError("--index-root is required (or set QUARRY_INDEX_ROOT)")
    if args.shard_docs < 1 or args.batch_size < 1:
        raise UsageError("--shard-docs and --batch-size must be >= 1")
    if args.gate_cases:
        try:
            load_cases(args.gate_cases)
        except CaseError as e:
            raise UsageError(f"--gate-cases: {e}") from None
    return BuildSettings(
        source=args.source, index_root=args.index_root, master=args.master,
        tenants=tuple(args.tenants.split(",")) if args.tenants else None, shard_docs=args.shard_docs,
        contextualizer=args.contextualizer, llm=llm, llm_api_key=key, embedder=args.embedder,
        batch_size=args.batch_size, chunk_tokens=args.chunk_tokens, partitions=args.partitions, publish=not args.no_publish,
        report_path=args.report_path, quiet=args.quiet,
    )


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    report = run_build(settings, case_gate=case_gate(args.gate_cases) if args.gate_cases else None)
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        for t, tr in sorted(report.tenants.items()):
            print(f"{t}: input={tr.input_records} documents={tr.documents} quarantined={tr.quarantined} "
                  f"passages={tr.passages} shards={tr.shards} gen={tr.generation} published={tr.published}")
    return 0
