"""``quarry eval <suite>``: evaluation entry points."""

from __future__ import annotations


def add_arguments(p) -> None:
    from quarry.eval import beir

    sub = p.add_subparsers(dest="suite", metavar="SUITE", required=True)
    b = sub.add_parser("beir", help="nDCG@10 / recall@100 per stage on a BEIR dataset, plus lexical throughput")
    beir.add_arguments(b)
    b.set_defaults(_suite_run=beir.run)
    from quarry.eval import traces

    t = sub.add_parser("traces", help="summarise stored serving traces (per tenant: kinds, reasons, stage latencies)")
    traces.add_arguments(t)
    t.set_defaults(_suite_run=traces.run)


def run(args) -> int:
    return args._suite_run(args)
