"""DESIGN §1: importing any ``quarry.core`` module loads neither ray, nor pyspark, nor torch
(nor sentence-transformers), and core never imports ``quarry.eval`` or ``quarry.serve``."""

import pkgutil
import subprocess
import sys

import pytest

import quarry.core

pytestmark = pytest.mark.unit

CORE_MODULES = sorted(f"quarry.core.{m.name}" for m in pkgutil.iter_modules(quarry.core.__path__))
HEAVY = ("ray", "pyspark", "torch", "sentence_transformers", "transformers", "quarry.eval", "quarry.serve",
         "quarry.jobs")


def test_every_core_module_is_found():
    assert {"quarry.core.search", "quarry.core.index", "quarry.core.resolve"} <= set(CORE_MODULES)


@pytest.mark.parametrize("module", CORE_MODULES)
def test_import_is_light(module):
    code = (f"import sys, {module}\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} imported {out.stdout.strip()}"
