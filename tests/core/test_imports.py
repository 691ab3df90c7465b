import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_import_quarry_core_is_light():
    code = (
        "import sys, quarry.core, quarry.core.records, quarry.core.search, quarry.core.index, "
        "quarry.core.chunking, quarry.core.sources, quarry.core.contextualize, quarry.core.rerank, "
        "quarry.core.pipeline, quarry.core.embedding, quarry.core.layout, quarry.core.filters\n"
        "heavy = [m for m in ('ray', 'pyspark', 'torch', 'sentence_transformers', 'transformers') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"quarry.core imported heavy modules: {out.stdout}"
