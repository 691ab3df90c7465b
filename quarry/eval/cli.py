"""``quarry eval <suite>``: evaluation entry points."""

from __future__ import annotations

from quarry.eval import beir, case_diff, report_cases, traces


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="suite", metavar="SUITE", required=True)
    b = sub.add_parser("beir", help="nDCG@10 / recall@100 per stage on a BEIR dataset, plus lexical throughput")
    beir.add_arguments(b)
    b.set_defaults(_suite_run=beir.run)
    c = sub.add_parser("cases", help="evidence cases: per-boundary survival, resolution, abstention, isolation gate")
    report_cases.add_arguments(c)
    c.set_defaults(_suite_run=report_cases.run)
    d = sub.add_parser("cases-diff", help="what a change did to an evidence-case run: outcomes gained and lost, "
                                          "false assertions, counterfactual flips")
    case_diff.add_arguments(d)
    d.set_defaults(_suite_run=case_diff.run)
    t = sub.add_parser("traces", help="summarise stored serving traces (per tenant: kinds, reasons, stage latencies)")
    traces.add_arguments(t)
    t.set_defaults(_suite_run=traces.run)


def run(args) -> int:
    return args._suite_run(args)
