"""Evidence cases (seed 000 §11.12): running a suite of cases against published indexes.

The runner sends each query through the real search path (principal mask, both legs, RRF,
the tenant's gate-promoted second stage, expansion, evidence resolution) and scores the
case at each boundary, at document granularity (a document id matches any of its
passages; an id with ``#`` names one passage):

1. ``candidates``: every minimum-evidence id is among the fused candidates (recall at
   candidate width) of some query of the case;
2. ``second_stage``: ... and among the passages the second stage kept (the fused top_k
   when no second stage is enabled);
3. ``delivered``: ... and among the excerpts delivered in the final k;
4. ``resolution``: the decision record makes every ``governing`` id governing, every
   expected-selected id governing or supporting, rejects every must-reject id with an
   allowed reason code (and by the named id), leaves every ``unresolved`` id unresolved
   and every ``not_selected`` id rejected, unresolved or related-but-outdated (a plain
   ``related`` passage is neither selected nor rejected). A must-reject id that was never
   delivered fails (the record cannot show it was seen) unless the case marks it
   ``must_be_seen: false``.

With more than one query, or when the search ran without ``valid_at``, the decision is
``resolve()`` over everything the case's searches delivered, as of the case's date (the
evidence an agent's run has seen), with the case's queries as ``query``; otherwise it is
the search path's own decision. ``resolve_evidence`` is the one place that calls it.

Sweeps: a suite runs each case at every final width asked for (or its own ``top_k``) and
as every principal (its ``groups``, then each ``also_groups``); each (case, width,
principal) is one outcome, ``case@k{width}/{groups}``. A case is ``split: dev`` (what the
resolver was tuned on) or ``test`` (held out); summaries are per split, never blended.

Unanswerable cases are scored apart, never blended into accuracy. Each names its
``decisive_terms``: the words any answer would have to rest on (e.g. ``CAD`` and
``cutoff``). The deterministic sufficiency rule is: an *honest abstention* is a run whose
decision selects (as governing or supporting) no passage holding every decisive term (an
empty result, or one where such passages were only rejected, unresolved or related, is
honest); otherwise the selected evidence would let an agent assert an answer, and the case
counts as a *false assertion*.

The tenant-isolation gate is checked on every query of every run of every case (the runs
made only for counterfactuals included): a candidate, excerpt or
decision id that is not a passage of the principal's tenant readable by its groups, or a
document the case lists as another tenant's (``foreign``), is a leak; one leak fails the
whole run, whatever the accuracy.

Where each part lives: the case model and loader in :mod:`.case_model`, scoring in
:mod:`.case_scoring`, one run of one case in :mod:`.case_run`, the figures in
:mod:`.case_summary`, the counterfactuals in :mod:`.counterfactuals`; this module runs a
suite (:func:`run_suite`) over them. The CLI is :mod:`.report_cases`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from quarry.core.records import TOP_K_CEILING
from quarry.core.search.settings import SearchSettings
from quarry.eval.case_model import SPLITS, EvidenceCase
from quarry.eval.case_run import CaseContext, CaseOutcome, load_tenant, run_case
from quarry.eval.case_summary import counterfactual_summary, summarize_suite
from quarry.eval.counterfactuals import run_counterfactuals

__all__ = ["SuiteRun", "case_widths", "counterfactual_width", "run_suite"]


@dataclass
class SuiteRun:
    """A suite's outcomes, the contexts the counterfactuals ran on, their results, the
    summary and what the run was made against (``meta``)."""

    outcomes: list[CaseOutcome]
    contexts: list[CaseContext]  # one per (case, principal): the run at the counterfactual width
    summary: dict[str, Any]
    counterfactuals: list[Any] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def case_widths(case: EvidenceCase, widths: Sequence[int] | None) -> tuple[int, ...]:
    """The final widths a case runs at: ``widths`` (deduplicated, in order), or its own top_k."""
    return (case.top_k,) if widths is None else tuple(dict.fromkeys(widths))


def counterfactual_width(case: EvidenceCase) -> int:
    """Counterfactuals run at one width per principal, to bound time: the case's top_k
    (which defaults to TOP_K_DEFAULT = 4)."""
    return case.top_k


def run_suite(cases: Sequence[EvidenceCase], index_root: str, settings=None, *, widths: Sequence[int] | None = None,
              generation: dict[str, int] | None = None, counterfactuals: bool = True, search_fn=None,
              progress: Callable[[str], None] | None = None) -> SuiteRun:
    """Run every case at each final width in ``widths`` (None: the case's own top_k) and as
    each principal (its groups, then each ``also_groups``) against the published indexes
    under ``index_root`` (or the given generation per tenant). With ``counterfactuals``,
    each answerable case's four also run, once per principal at the case's top_k (a run
    made only for them, when that width is not swept, still counts for isolation)."""
    settings = settings or SearchSettings()
    if widths is not None:
        bad = [k for k in widths if not isinstance(k, int) or not 1 <= k <= TOP_K_CEILING]
        if bad or not widths:
            raise ValueError(f"widths must be integers 1..{TOP_K_CEILING}, got {list(widths)}")
    loaded: dict[str, tuple] = {}
    embedders: dict[str, Any] = {}
    outcomes, contexts, extra_leaks = [], [], []
    for case in cases:
        if case.tenant not in loaded:
            index, emb, second = load_tenant(index_root, case.tenant, (generation or {}).get(case.tenant))
            # One embedder object per model name: MiniLM loads once for every tenant.
            emb = embedders.setdefault(emb.name, emb)
            loaded[case.tenant] = (index, emb, second)
        index, emb, second = loaded[case.tenant]
        ks, cf_k = case_widths(case, widths), counterfactual_width(case)
        # A sweep names each run case@k{width}/{principal}; a case run once (its own top_k,
        # its own groups) keeps its bare id, as the promotion gate compares them.
        suffix = widths is not None or bool(case.also_groups)
        for groups in case.principal_groups:
            for k in ks:
                out, ctx = run_case(case, index, emb, settings, second, search_fn, width=k, groups=groups,
                                    suffix=suffix)
                outcomes.append(out)
                if k == cf_k:
                    contexts.append(ctx)
                if progress:
                    progress(f"{out.id}: {'ok' if not out.failures and not out.leaks else 'FAIL'}")
            if cf_k not in ks and counterfactuals and case.answerable:
                out, ctx = run_case(case, index, emb, settings, second, search_fn, width=cf_k, groups=groups)
                contexts.append(ctx)
                extra_leaks += [f"{out.id} (counterfactual base run): {leak}" for leak in out.leaks]
    run = SuiteRun(outcomes, contexts, summarize_suite(outcomes, extra_leaks),
                   meta={"index_root": str(index_root),
                         "widths": "case" if widths is None else list(dict.fromkeys(widths)),
                         "generations": {t: v[0].generation for t, v in loaded.items()},
                         "embedder": {t: v[1].name for t, v in loaded.items()},
                         "second_stage": {t: v[2] is not None for t, v in loaded.items()}})
    if counterfactuals:
        run.counterfactuals = run_counterfactuals(contexts, index_root, settings, loaded, search_fn)
        run.summary["counterfactuals"] = {
            sp: counterfactual_summary([r for r in run.counterfactuals if r.split == sp])
            for sp in SPLITS if any(r.split == sp for r in run.counterfactuals)}
    return run
