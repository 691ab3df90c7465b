"""Session-wide fixtures: paths, the sample corpus, and one local Spark session.

Spark starts at most once per test session (it costs ~10 s here); tests that need it
take the ``spark`` fixture. Ray/Serve fixtures live in tests/serve/conftest.py. Helper
modules shared across test folders are the ``helpers`` package (``tests/helpers/``), importable
because ``pyproject.toml`` puts ``tests/`` on pytest's ``pythonpath``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SCIFACT = SHARED / "data" / "beir" / "scifact"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def scifact_dir() -> Path:
    if not (SCIFACT / "corpus.jsonl").exists():
        pytest.skip(f"BEIR SciFact not found at {SCIFACT} (it is provided read-only in ../shared)")
    return SCIFACT


@pytest.fixture(scope="session")
def sample_docs():
    from quarry.core.ingest.sources import SAMPLE_CORPUS, load_documents

    docs, bad = load_documents(SAMPLE_CORPUS)
    assert not bad, bad
    return docs


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A moto S3 server (subprocess) with one bucket, reached the way a cluster reaches its
    object store: fsspec/AWS environment variables, exported before Spark or Ray start so
    their workers inherit them (``tests/helpers/s3.py``). ``s3_server.uri("x")`` is an
    ``s3://`` URI in the bucket."""
    from helpers import s3

    server = s3.start(log_path=str(tmp_path_factory.mktemp("moto") / "moto.log"))
    server.export()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory, s3_server):
    """One local Spark session for the whole test run. It takes ``s3_server`` so its Python
    workers inherit the object store's environment (an env var set after the JVM started
    never reaches them)."""
    from quarry.jobs.spark import get_spark

    session = get_spark("local[2]", app_name="quarry-tests",
                        local_dir=str(tmp_path_factory.mktemp("spark-local")))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def minilm():
    from quarry.core.embed.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder().load()


@pytest.fixture(scope="session")
def sample_index_root(tmp_path_factory, sample_docs, minilm) -> str:
    """The sample corpus built once with the packaged MiniLM and extractive preambles."""
    from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path_factory.mktemp("sample-index"))
    build_corpus(sample_docs, root, minilm, ExtractiveContextualizer())
    return root
