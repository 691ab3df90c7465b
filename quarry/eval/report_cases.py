"""``quarry eval cases``: run an evidence-case suite and write its report.

Outputs (``--out DIR``): ``cases.json`` (everything, for machines), ``cases.md`` (the
boundary-survival table of seed 000 §11.12, the unanswerable rates, the counterfactuals
and every failing case) and ``funnel.png`` (where the minimum evidence disappeared).
Each case runs at every final width of ``--widths`` and as every principal (its groups,
then each ``also_groups``); every (case, width, principal) is one outcome. Dev and test
cases are summarised apart, never blended.

Exit status: 0 when the tenant-isolation gate holds, 1 when any leak was seen (whatever the
accuracy), 2 for bad input (an invalid case file, an unknown split, bad widths, a missing
build source, no index).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from quarry.core.records import TOP_K_CEILING
from quarry.eval.case_model import principal_label


def add_arguments(p) -> None:
    p.add_argument("cases", metavar="FILE_OR_DIR", help="a case YAML file or a folder of them (e.g. eval/cases)")
    p.add_argument("--index-root", required=True, help="index root holding the cases' tenants (built by `quarry build`)")
    p.add_argument("--json", action="store_true", help="print the full result as JSON instead of the Markdown report")
    p.add_argument("--out", default=None, help="write cases.json, cases.md and funnel.png into this folder")
    p.add_argument("--no-counterfactuals", action="store_true", help="skip the four counterfactuals per case")
    p.add_argument("--tenant", default=None, help="run only this tenant's cases")
    p.add_argument("--split", default="all", metavar="dev|test|all",
                   help="run only the dev or the test cases (default all; the report keeps splits apart either way)")
    p.add_argument("--widths", default="2,4,8", metavar="K,K,...|case",
                   help=f"final widths each case runs at, comma-separated, 1..{TOP_K_CEILING} (default 2,4,8); "
                        "'case' runs each case at its own top_k")
    p.add_argument("--build", metavar="SOURCE", action="append", default=None,
                   help="first build SOURCE in-process (MiniLM, extractive preambles) into --index-root for each of "
                        "its tenants without an index there; repeatable or comma-separated "
                        "(e.g. --build quarry/sample_corpus --build eval/corpora)")


def parse_widths(text: str) -> tuple[int, ...] | None:
    """``"2,4,8"`` -> (2, 4, 8); ``"case"`` -> None (each case's own top_k). Raises ValueError."""
    if text.strip() == "case":
        return None
    parts = [x.strip() for x in text.split(",")]
    try:
        ks = tuple(int(x) for x in parts)
    except ValueError:
        ks = ()
    if not ks or any(not 1 <= k <= TOP_K_CEILING for k in ks):
        raise ValueError(f"--widths {text!r}: expected comma-separated integers 1..{TOP_K_CEILING} "
                         "(e.g. 2,4,8) or 'case'")
    return tuple(dict.fromkeys(ks))


def parse_sources(values: list[str] | None) -> list[str]:
    """Repeated and comma-separated --build values, in order, each once."""
    return list(dict.fromkeys(x.strip() for v in values or () for x in v.split(",") if x.strip()))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _frac(n: int, d: int) -> str:
    return f"{n} / {d} = {_pct(n / d if d else None)}"


def to_json(run) -> dict[str, Any]:
    return {
        "meta": run.meta,
        "summary": run.summary,
        "cases": [o.model_dump(mode="json") for o in run.outcomes],
        "counterfactuals": [c.model_dump(mode="json") for c in run.counterfactuals],
    }


def _split_markdown(run, split: str, s: dict[str, Any]) -> list[str]:
    widths = s["widths"]
    bw = s["by_width"]
    lines = [
        "", f"## Split: {split}", "",
        f"{s['case_count']} cases, {s['cases']} outcomes (case x width x principal): {s['answerable']} answerable, "
        f"{s['unanswerable']} unanswerable; widths {widths}.",
        "",
        f"**Tenant isolation ({split}): {s['isolation']}**" + (f" ({len(s['leaks'])} leaks)" if s["leaks"] else ""),
        "",
        f"### Boundary survival ({split}, answerable outcomes)",
        "",
        "| Boundary | Outcomes surviving | Conditional rate | " + " | ".join(f"k={k}" for k in widths)
        + " | What failure means |",
        "|---|---:|---:|" + "---:|" * len(widths) + "---|",
    ]
    for i, r in enumerate(s["boundaries"]):
        per = [bw[str(k)]["boundaries"][i] for k in widths]
        lines.append(f"| {r['label']} | {r['surviving']} / {r['of']} | {_pct(r['conditional_rate'])} | "
                     + " | ".join(f"{x['surviving']} / {x['of']}" for x in per) + f" | {r['failure_means']} |")
    lines += [
        "",
        f"Resolution correct ({split}, whatever the earlier boundaries): {_frac(s['resolution_correct'], s['answerable'])} overall; "
        + "; ".join(f"k={k}: {_frac(bw[str(k)]['resolution_correct'], bw[str(k)]['answerable'])}" for k in widths)
        + ".",
        "",
        f"Precision at final k (relevant delivered excerpts / delivered): {_pct(s['precision_at_k'])}. "
        f"Mean fraction of the minimum evidence among the candidates: {_pct(s['candidate_recall_mean_fraction'])}.",
        "",
        f"### Unanswerable outcomes ({split}, not part of accuracy)",
        "",
        f"- honest abstention: {_frac(s['honest_abstentions'], s['unanswerable'])}",
        f"- false assertion: {_frac(s['false_assertions'], s['unanswerable'])}",
    ]
    if len(widths) > 1:
        lines += ["- per width: " + "; ".join(
            f"k={k}: {bw[str(k)]['honest_abstentions']} honest / {bw[str(k)]['false_assertions']} false"
            for k in widths)]
    cf = (run.summary.get("counterfactuals") or {}).get(split)
    if cf:
        lines += ["", f"### Counterfactuals ({split}, answerable cases, one width per principal)", "",
                  "| Counterfactual | Passed | Applicable | Not applicable | Failing runs |", "|---|---:|---:|---:|---|"]
        for kind, v in cf.items():
            failing = ", ".join(v["failing"][:8]) + (" ..." if len(v["failing"]) > 8 else "")
            lines.append(f"| {kind} | {v['passed']} | {v['applicable']} | {v['not_applicable']} | {failing} |")
    if s["leaks"]:
        lines += ["", f"### Leaks ({split})", ""] + [f"- {x}" for x in s["leaks"]]
    lines += ["", f"### Failing outcomes ({split})", ""]
    if s["failing_cases"]:
        lines += ["| Case | Width | Principal | Failures |", "|---|---:|---|---|"]
        for f in s["failing_cases"]:
            lines.append(f"| {f['case']} | {f['width']} | {f['principal']} | "
                         f"{'; '.join(f['failures']).replace('|', '/')} |")
    else:
        lines.append("none")
    lines += ["", f"### Cases ({split})", "",
              "| Case | Width | Principal | Kinds | Cand. | 2nd stage | Delivered | Resolution | P@k |",
              "|---|---:|---|---|:-:|:-:|:-:|:-:|---:|"]
    mark = {True: "yes", False: "**no**", None: ""}
    for o in run.outcomes:
        if o.split != split:
            continue
        if o.answerable:
            cells = [mark[o.candidates], mark[o.second_stage], mark[o.delivered], mark[o.resolution],
                     "" if o.precision is None else f"{o.precision:.2f}"]
        else:
            cells = ["", "", "", "honest" if o.abstained else "**asserts**", ""]
        lines.append(f"| {o.case_id} | {o.width} | {principal_label(o.groups)} | {', '.join(o.kinds)} | "
                     + " | ".join(cells) + " |")
    return lines


def to_markdown(run, plot_name: str | None = None) -> str:
    s = run.summary
    lines = [
        "# Evidence cases",
        "",
        f"{s['cases']} cases, {s['outcomes']} outcomes (each case at widths "
        f"{run.meta.get('widths')} for each principal); index root `{run.meta.get('index_root')}`, "
        f"generations {run.meta.get('generations')}, embedder {sorted(set(run.meta.get('embedder', {}).values()))}, "
        f"second stage per tenant {run.meta.get('second_stage')}. Dev (what the resolver was tuned on) and test "
        "(held out) are reported apart, never blended.",
        "",
        f"**Tenant isolation: {s['isolation']}** (every run, counterfactual base runs included)"
        + (f", {len(s['leaks'])} leaks" if s["leaks"] else ""),
        "",
        "## Resolution correct by width and split",
        "",
        "| Width | " + " | ".join(s["splits"]) + " |",
        "|---:|" + "---:|" * len(s["splits"]),
    ]
    for k, row in s["resolution_by_width"].items():
        lines.append(f"| {k} | " + " | ".join(
            _frac(row[sp]["correct"], row[sp]["of"]) if sp in row else "" for sp in s["splits"]) + " |")
    lines.append("| all | " + " | ".join(_frac(v["resolution_correct"], v["answerable"])
                                          for v in s["splits"].values()) + " |")
    lines += ["", "The same decision at every width (case x principal run at several widths; documents):", "",
              "| | " + " | ".join(s["splits"]) + " |", "|---|" + "---:|" * len(s["splits"])]
    for part in ("governing", "rejected", "unresolved"):
        lines.append(f"| {part} | " + " | ".join(
            _frac(v["same_at_every_width"][part], v["same_at_every_width"]["runs"]) for v in s["splits"].values())
            + " |")
    lines += ["", "Honest abstention: the decision selects (as governing or supporting) no passage holding every "
              "decisive term of the case (an empty result, or such passages only rejected, unresolved or related)."]
    if plot_name:
        lines += ["", f"![where the minimum evidence disappeared]({plot_name})"]
    for split, sub in s["splits"].items():
        lines += _split_markdown(run, split, sub)
    return "\n".join(lines) + "\n"


def funnel_plot(run, path: str | Path) -> None:
    """Per split: bars of answerable outcomes surviving each boundary, with the number lost at each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = run.summary["splits"] or {"dev": None}
    fig, axes = plt.subplots(1, len(splits), figsize=(8 * len(splits), 4), squeeze=False)
    for ax, (split, s) in zip(axes[0], splits.items()):
        rows = s["boundaries"][:-1] if s else []
        n = s["answerable"] if s else 0
        labels = ["all answerable"] + [r["label"].replace("Minimum evidence ", "").replace(" the ", "\n")
                                       for r in rows]
        values = [n] + [r["surviving"] for r in rows]
        bars = ax.bar(range(len(values)), values, color=["#888"] + ["#2b6cb0"] * len(rows))
        for i, (b, v) in enumerate(zip(bars, values)):
            lost = values[i - 1] - v if i else 0
            ax.text(b.get_x() + b.get_width() / 2, v + 0.3, f"{v}" + (f"\n(-{lost})" if lost else ""),
                    ha="center", va="bottom", fontsize=9)
        ax.set_xticks(range(len(values)), labels, fontsize=8)
        ax.set_ylabel("outcomes (case x width x principal)")
        ax.set_ylim(0, max(values + [1]) * 1.25)
        ax.set_title(f"Where the minimum evidence disappeared ({split})")
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


def build_sources(sources: list[str], index_root: str, tenants_needed: set[str] | None = None,
                  embedder=None, progress=None) -> str | None:
    """Build in-process (``core.pipeline.build_corpus``, extractive preambles) every tenant of
    each source that has no published index under ``index_root`` yet; tenants already there
    are left alone. ``embedder`` defaults to MiniLM. Returns an error line, or None."""
    from quarry.core.index import layout
    from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.core.ingest.sources import load_documents

    missing = [s for s in sources if not Path(s).exists()]
    if missing:
        return f"--build {missing[0]}: no such file or folder"
    say = progress or (lambda m: print(f"[cases] {m}", file=sys.stderr, flush=True))
    for source in sources:
        docs, bad = load_documents(source)
        if not docs:
            return f"--build {source}: no valid source documents ({len(bad)} quarantined)"
        todo = [d for d in docs if layout.current_generation(index_root, d.tenant) is None]
        if not todo:
            continue
        if embedder is None:
            from quarry.core.embed.embedders import SentenceTransformerEmbedder

            embedder = SentenceTransformerEmbedder().load()
        tenants = sorted({d.tenant for d in todo})
        say(f"building {len(todo)} documents of {source} ({', '.join(tenants)}) into {index_root} "
            f"({embedder.name}, in-process)")
        build_corpus(todo, index_root, embedder, ExtractiveContextualizer(), progress=say)
    still = sorted(t for t in (tenants_needed or ()) if layout.current_generation(index_root, t) is None)
    if still:
        return (f"no source given to --build holds tenant(s) {', '.join(still)} "
                f"(built from {', '.join(sources)})")
    return None


def run(args) -> int:
    # deferred: the search path (bm25s, numpy, scipy) costs about a second at CLI start
    from quarry.eval.case_model import SPLITS, CaseError, load_cases
    from quarry.eval.case_run import IndexMissing
    from quarry.eval.cases import run_suite

    def fail(msg: str) -> int:
        print(f"quarry eval cases: error: {msg}", file=sys.stderr)
        return 2

    if args.split not in (*SPLITS, "all"):
        return fail(f"--split {args.split!r}: expected one of dev, test, all")
    try:
        widths = parse_widths(args.widths)
    except ValueError as e:
        return fail(str(e))
    try:
        cases = load_cases(args.cases)
    except CaseError as e:
        return fail(str(e))
    if args.tenant:
        cases = [c for c in cases if c.tenant == args.tenant]
        if not cases:
            return fail(f"no case for tenant {args.tenant!r} in {args.cases}")
    if args.split != "all":
        cases = [c for c in cases if c.split == args.split]
        if not cases:
            return fail(f"no {args.split} case in {args.cases}"
                        + (f" for tenant {args.tenant!r}" if args.tenant else ""))
    sources = parse_sources(args.build)
    if sources:
        try:
            err = build_sources(sources, args.index_root, {c.tenant for c in cases})
        except (OSError, ValueError) as e:
            err = f"--build: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        if err:
            return fail(err)
    try:
        result = run_suite(cases, args.index_root, widths=widths, counterfactuals=not args.no_counterfactuals,
                           progress=lambda m: print(f"[cases] {m}", file=sys.stderr, flush=True))
    except IndexMissing as e:
        return fail(str(e))
    if args.out:
        write_report(result, args.out)
    print(json.dumps(to_json(result), indent=2, sort_keys=True, default=str) if args.json else to_markdown(result))
    return 0 if result.summary["isolation"] == "pass" else 1
