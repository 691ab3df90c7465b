"""DESIGN §1: importing any ``quarry.core`` module loads neither ray, nor pyspark, nor torch
(nor sentence-transformers), and core never imports ``quarry.eval``, ``quarry.serve`` or
``quarry.jobs``: not at import time (a subprocess check) and nowhere in its source, not even
inside a function (a static check with ast)."""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import quarry.core

pytestmark = pytest.mark.unit

CORE_MODULES = sorted(m.name for m in pkgutil.walk_packages(quarry.core.__path__, prefix="quarry.core.") if not m.ispkg)
HEAVY = ("ray", "pyspark", "torch", "sentence_transformers", "transformers", "quarry.eval", "quarry.serve",
         "quarry.jobs", "spacy", "thinc", "quantulum3", "pint", "dateparser")


def test_every_core_module_is_found():
    assert {"quarry.core.search.composer", "quarry.core.index.shards", "quarry.core.evidence.resolve"} <= set(CORE_MODULES)


@pytest.mark.parametrize("module", CORE_MODULES)
def test_import_is_light(module):
    code = (f"import sys, {module}\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} imported {out.stdout.strip()}"


CORE_DIR = Path(quarry.core.__path__[0])
FORBIDDEN = ("quarry.eval", "quarry.serve", "quarry.jobs")


def quarry_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Every ``import quarry.x`` / ``from quarry.x import`` in a module, at any depth (inside
    functions and ``TYPE_CHECKING`` blocks too), as (line, module)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def test_the_static_check_sees_nested_imports():
    tree = ast.parse("def f():\n    from quarry.eval.metrics import ndcg_at_k\nfrom quarry import serve\n")
    found = sorted(m for _, m in quarry_imports(tree) if m.startswith(FORBIDDEN))
    assert found == ["quarry.eval.metrics", "quarry.eval.metrics.ndcg_at_k", "quarry.serve"]


@pytest.mark.parametrize("path", sorted(CORE_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(CORE_DIR)))
def test_core_never_imports_eval_serve_or_jobs(path):
    bad = [f"{path.name}:{n} {m}" for n, m in quarry_imports(ast.parse(path.read_text()))
           if m in FORBIDDEN or m.startswith(tuple(f + "." for f in FORBIDDEN))]
    assert not bad, f"core must not import eval, serve or jobs (core is what they build on): {bad}"
