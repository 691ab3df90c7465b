"""The ``quarry`` command line. Each subcommand lives in the module that owns it and
exposes ``add_arguments(parser)`` and ``run(args) -> int``; heavy imports happen in
``run`` so ``quarry --help`` stays fast.

One error reporter for every command (``main``): a user mistake prints one line and exits
2; an internal error prints a short message and exits 1 (the traceback with ``--debug``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from pydantic import ValidationError

from quarry.core.errors import UsageError

# Optional extras and the modules that mark them missing when an import fails.
EXTRAS = {"pyspark": "spark", "pandas": "spark", "ray": "serve", "fastapi": "serve", "uvicorn": "serve",
          "jwt": "serve", "httpx": "serve", "onnxruntime": "onnx", "onnx": "onnx", "matplotlib": "dev"}


def one_line(text: object) -> str:
    """Collapse a message to one line (pydantic and argparse messages span several)."""
    return " ".join(str(text).split())


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (what was wrong; where the help is)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see `{self.prog} --help`)\n")

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("quarry.demo", "the main job: build the sample corpus and run searches (README's first command)"),
    "build": ("quarry.build_cmd", "PySpark job: validate, chunk, contextualize, embed and publish per-tenant indexes"),
    "search": ("quarry.search_cmd", "search a published index in-process as a given principal (operators)"),
    "eval": ("quarry.eval.cli", "evaluate retrieval stages (BEIR datasets, evidence cases)"),
    "serve": ("quarry.serve.serve_cmd", "start the Ray Serve endpoint for agents"),
    "token": ("quarry.serve.token_cmd", "mint a development bearer token"),
    "train-ranker": ("quarry.jobs.train_ranker", "train a tenant's learned second-stage ranker and gate it"),
    "plan": ("quarry.plan_cmd", "capacity plan from a workload profile: cost table, Serve autoscaling config, RayService"),
    "apply-changes": ("quarry.jobs.apply_changes", "PySpark job: apply a change log (upserts, deletes, ACL changes) as delta generations"),
    "compact": ("quarry.jobs.compact", "fold a tenant's delta, tombstones and ACL overrides into a new base generation"),
    "reconcile": ("quarry.jobs.reconcile", "compare the source of truth with the index and repair drift through the change path"),
    "gc": ("quarry.gc_cmd", "delete a tenant's old generations and retired deltas past the retention setting"),
    "rollback": ("quarry.rollback_cmd", "make another complete generation of a tenant live (its delta restored, or refused)"),
    "purge": ("quarry.purge_cmd", "remove a document or a whole tenant from every copy (storage and serving replicas)"),
    "status": ("quarry.status_cmd", "per-tenant freshness: change-to-visible lag and the oldest unapplied change"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """All subcommands are listed; only ``command``'s module is imported (help stays fast)."""
    p = Parser(prog="quarry", description="Quarry: multi-tenant evidence retrieval for AI agents.")
    p.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for name, (module, help_) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        if name != command:
            continue
        try:
            mod = importlib.import_module(module)
        except ImportError as e:  # an optional extra is missing: say which
            sp.set_defaults(_missing=_missing_extra(name, e))
            continue
        mod.add_arguments(sp)
        sp.set_defaults(_run=mod.run)
    return p


def _missing_extra(command: str, e: ImportError) -> str:
    mod = (getattr(e, "name", None) or "").split(".")[0]
    extra = EXTRAS.get(mod, "spark,serve")
    return (f"quarry {command}: error: this command needs the '{extra}' extra ({mod or e} is not installed); "
            f"install it with: pip install -e '.[{extra}]'")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command if command in COMMANDS else None).parse_args(argv)
    if getattr(args, "_missing", None):
        print(args._missing, file=sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except UsageError as e:
        print(f"quarry {args.command}: error: {one_line(e)}", file=sys.stderr)
        return 2
    except ValidationError as e:  # settings or records built from the user's flags/files
        errs = "; ".join(f"{'.'.join(map(str, x['loc'])) or 'input'}: {x['msg']}" for x in e.errors())
        print(f"quarry {args.command}: error: {one_line(errs)}", file=sys.stderr)
        return 2
    except ImportError as e:  # an import deferred into run(): the same missing-extra message
        if (getattr(e, "name", None) or "").split(".")[0] in EXTRAS:
            print(_missing_extra(args.command, e), file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print(f"quarry {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the one place internal errors are reported
        if args.debug:
            traceback.print_exc()
        print(f"quarry {args.command}: internal error: {type(e).__name__}: {one_line(e)[:300]}"
              + ("" if args.debug else " (rerun with `quarry --debug ...` for the traceback)"), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
