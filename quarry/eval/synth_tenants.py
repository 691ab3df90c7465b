"""Synthetic multi-tenant corpora in the build's input format (JSONL source records), for
scaling benchmarks of ``quarry build`` (``quarry.eval.bench_build_scaling``).

``N`` tenants of ``M`` documents each, optionally plus one large tenant. The text is
deterministic for a seed: words drawn Zipf-like from a shared vocabulary, plus terms and
identifiers of the tenant's own (``t00042-k17``), so the union of all tenants' vocabularies
grows with the tenant count as a real platform's does. Records are spread over part files
of at most ``docs_per_file`` records so the read stage has files to spread over its tasks.

    python -m quarry.eval.synth_tenants --tenants 10000 --docs 10 --out var/synth-10k
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SHARED_VOCAB = 5000
OWN_TERMS = 50  # terms of a tenant's own
WORDS_PER_DOC = (40, 90)
DOC_TYPES = ("page", "policy", "ticket")


@dataclass(frozen=True)
class SynthSpec:
    tenants: int
    docs_per_tenant: int
    large_tenant_docs: int = 0  # one extra tenant ("big") with this many documents; 0 = none
    seed: int = 0
    docs_per_file: int = 20_000

    @property
    def documents(self) -> int:
        return self.tenants * self.docs_per_tenant + self.large_tenant_docs


def _shared_vocab() -> list[str]:
    """Pronounceable pseudo-words, the same for every seed (a fixed language)."""
    rng = random.Random(12345)
    cons, vow = "bcdfghjklmnprstvwz", "aeiou"
    out: set[str] = set()
    while len(out) < SHARED_VOCAB:
        out.add("".join(rng.choice(cons) + rng.choice(vow) for _ in range(rng.randint(2, 4))))
    return sorted(out)


def tenant_name(i: int) -> str:
    return f"t{i:06d}"


def _records(tenant: str, n_docs: int, rng: random.Random, vocab: list[str], weights: list[float]) -> Iterator[dict]:
    own = [f"{tenant}-k{k}" for k in range(OWN_TERMS)]
    for d in range(n_docs):
        n = rng.randint(*WORDS_PER_DOC)
        words = rng.choices(vocab, weights=weights, k=n)
        for j in rng.sample(range(n), k=min(n, 3)):
            words[j] = rng.choice(own)
        title = " ".join(rng.choices(vocab, weights=weights, k=4)).capitalize()
        yield {
            "doc_id": f"doc-{d}", "tenant": tenant, "title": title,
            "text": f"# {title}\n\n" + " ".join(words) + ".\n",
            "acl": ["*"] if d % 3 else ["staff"], "doc_type": DOC_TYPES[d % len(DOC_TYPES)],
        }


def generate(spec: SynthSpec) -> Iterator[dict]:
    """Every source record of the corpus, tenant by tenant."""
    vocab = _shared_vocab()
    weights = [1.0 / (r + 1) for r in range(len(vocab))]  # Zipf, s=1
    for i in range(spec.tenants):
        t = tenant_name(i)
        yield from _records(t, spec.docs_per_tenant, random.Random(f"{spec.seed}:{t}"), vocab, weights)
    if spec.large_tenant_docs:
        yield from _records("big", spec.large_tenant_docs, random.Random(f"{spec.seed}:big"), vocab, weights)


def write_corpus(spec: SynthSpec, out: str | Path) -> list[Path]:
    """Write the corpus as ``part-*.jsonl`` under ``out``; returns the files."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("part-*.jsonl"):
        old.unlink()
    files: list[Path] = []
    fh = None
    for k, rec in enumerate(generate(spec)):
        if k % spec.docs_per_file == 0:
            if fh is not None:
                fh.close()
            files.append(root / f"part-{len(files):05d}.jsonl")
            fh = files[-1].open("w", encoding="utf-8")
        fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    if fh is not None:
        fh.close()
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quarry.eval.synth_tenants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenants", type=int, required=True, help="small tenants")
    ap.add_argument("--docs", type=int, default=10, help="documents per small tenant")
    ap.add_argument("--large-tenant-docs", type=int, default=0, help="documents of one extra large tenant ('big')")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--docs-per-file", type=int, default=20_000)
    ap.add_argument("--out", required=True, help="folder for part-*.jsonl")
    a = ap.parse_args(argv)
    spec = SynthSpec(a.tenants, a.docs, a.large_tenant_docs, a.seed, a.docs_per_file)
    files = write_corpus(spec, a.out)
    print(f"{spec.documents} documents of {spec.tenants + bool(spec.large_tenant_docs)} tenants in {len(files)} files "
          f"under {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
