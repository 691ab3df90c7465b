"""The ``quarry`` command line. Each subcommand lives in the module that owns it and
exposes ``add_arguments(parser)`` and ``run(args) -> int``; heavy imports happen in
``run`` so ``quarry --help`` stays fast."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("quarry.demo", "the main job: build the sample corpus and run searches (README's first command)"),
    "build": ("quarry.jobs.build", "PySpark job: validate, chunk, contextualize, embed and publish per-tenant indexes"),
    "search": ("quarry.search_cmd", "search a published index in-process as a given principal (operators)"),
    "eval": ("quarry.eval.cli", "evaluate retrieval stages (BEIR datasets, evidence cases)"),
    "serve": ("quarry.serve.cli_entry", "start the Ray Serve endpoint for agents"),
    "token": ("quarry.serve.token_cmd", "mint a development bearer token"),
    "train-ranker": ("quarry.jobs.train_ranker", "train a tenant's learned second-stage ranker and gate it"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """All subcommands are listed; only ``command``'s module is imported (help stays fast)."""
    p = argparse.ArgumentParser(prog="quarry", description="Quarry: multi-tenant evidence retrieval for AI agents.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        if name != command:
            continue
        try:
            mod = importlib.import_module(module)
        except ImportError as e:  # an optional extra is missing: say which
            sp.set_defaults(_missing=f"`quarry {name}` is unavailable: {e}. "
                                     "Install the extras: pip install -e '.[spark,serve]'")
            continue
        mod.add_arguments(sp)
        sp.set_defaults(_run=mod.run)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command if command in COMMANDS else None).parse_args(argv)
    if getattr(args, "_missing", None):
        print(args._missing, file=sys.stderr)
        return 2
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
