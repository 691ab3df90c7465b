"""Evidence resolution (DESIGN §4 step 7): which passages govern at ``valid_at``.

INTERFACE ONLY (placeholder until the resolver lands): every passage is selected as
supporting evidence. The real rules (effective dates, supersession, conditions with
stopping events, scope, authority) replace the body of ``resolve``; the signature and
the ``Decision`` record (``quarry.core.records``) are the contract the search path,
the Resolver deployment, the citation checks and the evidence-case runner code against.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from quarry.core.records import Decision, Passage, Principal, SelectedEvidence


def resolve(
    passages: Sequence[Passage],
    principal: Principal,
    valid_at: dt.date | None = None,
    authority: Mapping[str, int] | None = None,
) -> Decision:
    """Decide over ``passages`` (all visible to ``principal``; callers filtered them).
    ``valid_at`` defaults to today. Order of ``passages`` never changes the result."""
    day = valid_at or dt.date.today()
    ids = sorted({p.passage_id for p in passages if principal.can_read(p.tenant, p.envelope.acl)})
    return Decision(valid_at=day, selected=tuple(SelectedEvidence(passage_id=i, reason="supporting") for i in ids))


def follow_up_queries(decision: Decision, passages: Sequence[Passage]) -> list[str]:
    """Contradiction search (issue 8 item 3): the narrow follow-up queries to run for the
    selected passages that state a threshold, owner, status, date or amount. The caller
    (the Gateway's composition, or the in-process search) runs them under the same
    principal and calls ``resolve`` again over the union. Placeholder: none."""
    return []
