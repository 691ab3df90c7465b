"""``quarry eval cases``: run an evidence-case suite and write its report.

Outputs (``--out DIR``): ``cases.json`` (everything, for machines), ``cases.md`` (the
boundary-survival table of seed 000 §11.12, the unanswerable rates, the counterfactuals
and every failing case) and ``funnel.png`` (where the minimum evidence disappeared).
Exit status: 0 when the tenant-isolation gate holds, 1 when any leak was seen (whatever the
accuracy), 2 for bad input (an invalid case file, no index).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def add_arguments(p) -> None:
    p.add_argument("cases", metavar="FILE_OR_DIR", help="a case YAML file or a folder of them (e.g. eval/cases/sample)")
    p.add_argument("--index-root", required=True, help="index root holding the cases' tenants (built by `quarry build`)")
    p.add_argument("--json", action="store_true", help="print the full result as JSON instead of the Markdown report")
    p.add_argument("--out", default=None, help="write cases.json, cases.md and funnel.png into this folder")
    p.add_argument("--no-counterfactuals", action="store_true", help="skip the four counterfactuals per case")
    p.add_argument("--tenant", default=None, help="run only this tenant's cases")
    p.add_argument("--build", metavar="SOURCE", default=None,
                   help="first build SOURCE in-process (MiniLM, extractive preambles) into --index-root when a "
                        "case's tenant has no index there (e.g. --build quarry/sample_corpus)")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def to_json(run) -> dict[str, Any]:
    return {
        "meta": run.meta,
        "summary": run.summary,
        "cases": [o.model_dump(mode="json") for o in run.outcomes],
        "counterfactuals": [c.model_dump(mode="json") for c in run.counterfactuals],
    }


def to_markdown(run, plot_name: str | None = None) -> str:
    s = run.summary
    lines = [
        "# Evidence cases",
        "",
        f"{s['cases']} cases ({s['answerable']} answerable, {s['unanswerable']} unanswerable); "
        f"index root `{run.meta.get('index_root')}`, generations {run.meta.get('generations')}, "
        f"embedder {sorted(set(run.meta.get('embedder', {}).values()))}, second stage per tenant "
        f"{run.meta.get('second_stage')}.",
        "",
        f"**Tenant isolation: {s['isolation']}**" + (f" ({len(s['leaks'])} leaks)" if s["leaks"] else ""),
        "",
        "## Boundary survival (answerable cases)",
        "",
        "| Boundary | Cases surviving | Conditional rate | What failure means |",
        "|---|---:|---:|---|",
    ]
    for r in s["boundaries"]:
        lines.append(f"| {r['label']} | {r['surviving']} / {r['of']} | {_pct(r['conditional_rate'])} | "
                     f"{r['failure_means']} |")
    lines += [
        "",
        f"Precision at final k (relevant delivered excerpts / delivered): {_pct(s['precision_at_k'])}. "
        f"Mean fraction of the minimum evidence among the candidates: {_pct(s['candidate_recall_mean_fraction'])}.",
        "",
        "## Unanswerable cases (not part of accuracy)",
        "",
        f"- honest abstention: {s['honest_abstentions']} / {s['unanswerable']} = {_pct(s['honest_abstention_rate'])}",
        f"- false assertion: {s['false_assertions']} / {s['unanswerable']} = {_pct(s['false_assertion_rate'])}",
        "",
        "Honest abstention: the decision selects no passage holding every decisive term of the case "
        "(an empty result, or such passages only rejected or unresolved).",
    ]
    if plot_name:
        lines += ["", f"![where the minimum evidence disappeared]({plot_name})"]
    cf = s.get("counterfactuals")
    if cf:
        lines += ["", "## Counterfactuals (answerable cases)", "",
                  "| Counterfactual | Passed | Applicable | Not applicable | Failing cases |", "|---|---:|---:|---:|---|"]
        for kind, v in cf.items():
            failing = ", ".join(v["failing"][:8]) + (" ..." if len(v["failing"]) > 8 else "")
            lines.append(f"| {kind} | {v['passed']} | {v['applicable']} | {v['not_applicable']} | {failing} |")
    lines += ["", "## Cases", "", "| Case | Kinds | Cand. | 2nd stage | Delivered | Resolution | P@k | Notes |",
              "|---|---|:-:|:-:|:-:|:-:|---:|---|"]
    mark = {True: "yes", False: "**no**", None: ""}
    for o in run.outcomes:
        if o.answerable:
            cells = [mark[o.candidates], mark[o.second_stage], mark[o.delivered], mark[o.resolution],
                     "" if o.precision is None else f"{o.precision:.2f}"]
        else:
            cells = ["", "", "", "honest" if o.abstained else "**asserts**", ""]
        notes = "; ".join(list(o.leaks) + list(o.failures))
        lines.append(f"| {o.id} | {', '.join(o.kinds)} | " + " | ".join(cells) + f" | {notes.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def funnel_plot(run, path: str | Path) -> None:
    """Bars of answerable cases surviving each boundary, with the number lost at each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = run.summary["boundaries"][:-1]
    n = run.summary["answerable"]
    labels = ["all answerable"] + [r["label"].replace("Minimum evidence ", "").replace(" the ", "\n") for r in rows]
    values = [n] + [r["surviving"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.bar(range(len(values)), values, color=["#888"] + ["#2b6cb0"] * len(rows))
    for i, (b, v) in enumerate(zip(bars, values)):
        lost = values[i - 1] - v if i else 0
        ax.text(b.get_x() + b.get_width() / 2, v + 0.3, f"{v}" + (f"\n(-{lost})" if lost else ""),
                ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(len(values)), labels, fontsize=8)
    ax.set_ylabel("cases")
    ax.set_ylim(0, max(values + [1]) * 1.25)
    ax.set_title("Where the minimum evidence disappeared")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(run, out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "cases.json", "md": out / "cases.md", "png": out / "funnel.png"}
    paths["json"].write_text(json.dumps(to_json(run), indent=2, sort_keys=True, default=str))
    funnel_plot(run, paths["png"])
    paths["md"].write_text(to_markdown(run, paths["png"].name))
    return paths


def _build(source: str, index_root: str) -> str | None:
    """The in-process build of ``source`` (``core.pipeline.build_corpus``); an error line or None."""
    from quarry.core.contextualize import ExtractiveContextualizer
    from quarry.core.embedding import SentenceTransformerEmbedder
    from quarry.core.pipeline import build_corpus
    from quarry.core.sources import load_documents

    if not Path(source).exists():
        return f"--build {source}: no such file or folder"
    docs, bad = load_documents(source)
    if not docs:
        return f"--build {source}: no valid source documents ({len(bad)} quarantined)"
    print(f"[cases] building {len(docs)} documents into {index_root} (MiniLM, in-process)", file=sys.stderr)
    build_corpus(docs, index_root, SentenceTransformerEmbedder().load(), ExtractiveContextualizer(),
                 progress=lambda m: print(f"[cases] {m}", file=sys.stderr, flush=True))
    return None


def run(args) -> int:
    from quarry.eval.cases import CaseError, IndexMissing, load_cases, run_suite

    try:
        cases = load_cases(args.cases)
    except CaseError as e:
        print(f"quarry eval cases: error: {e}", file=sys.stderr)
        return 2
    if args.tenant:
        cases = [c for c in cases if c.tenant == args.tenant]
        if not cases:
            print(f"quarry eval cases: error: no case for tenant {args.tenant!r} in {args.cases}", file=sys.stderr)
            return 2
    if args.build:
        from quarry.core import layout

        if any(layout.current_generation(args.index_root, t) is None for t in {c.tenant for c in cases}):
            err = _build(args.build, args.index_root)
            if err:
                print(f"quarry eval cases: error: {err}", file=sys.stderr)
                return 2
    try:
        result = run_suite(cases, args.index_root, counterfactuals=not args.no_counterfactuals,
                           progress=lambda m: print(f"[cases] {m}", file=sys.stderr, flush=True))
    except IndexMissing as e:
        print(f"quarry eval cases: error: {e}", file=sys.stderr)
        return 2
    if args.out:
        write_report(result, args.out)
    print(json.dumps(to_json(result), indent=2, sort_keys=True, default=str) if args.json else to_markdown(result))
    return 0 if result.summary["isolation"] == "pass" else 1
