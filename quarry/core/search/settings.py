"""Server-side search configuration: one frozen record, validated once where it enters
(``quarry search``'s defaults, ``ServeSettings.search``, evaluation) and passed down."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from quarry.core.records import TOP_K_CEILING, TOP_K_MAX

DEFAULT_CANDIDATE_WIDTH = 50  # fused candidates handed to the second stage


class SearchSettings(BaseModel):
    """Server-side search configuration, validated once at the edge."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rrf_k: int = Field(60, ge=0)
    lexical_width: int = Field(50, ge=1, le=1000)
    dense_width: int = Field(50, ge=1, le=1000)
    candidate_width: int = Field(DEFAULT_CANDIDATE_WIDTH, ge=1, le=1000)
    lexical_weight: float = Field(1.0, ge=0)
    dense_weight: float = Field(1.0, ge=0)
    lexical_floor: float = Field(0.0, ge=0, description="BM25 hits must score strictly above this")
    dense_floor: float = Field(0.15, ge=-1, le=1, description="cosine hits must score strictly above this")
    top_k_ceiling: int = Field(TOP_K_CEILING, ge=1, le=TOP_K_MAX)
    delivered_token_ceiling: int = Field(1500, ge=16)
    expand: bool = True
    pin_identifiers: bool = Field(
        True, description="for identifier lookups, passages holding every queried identifier verbatim rank first")
    follow_up_width: int = Field(3, ge=1, le=50, description="candidates each contradiction-search query adds")
    max_follow_ups: int = Field(2, ge=0, le=10, description="contradiction-search queries per search")
    graph_hops: int = Field(3, ge=0, le=6, description="evidence-graph links followed from the delivered "
                                                      "passages (0: off)")
    graph_limit: int = Field(48, ge=1, le=500, description="passages the evidence graph may add to one resolution")
    resolution_pool: int = Field(
        8, ge=0, le=50, description="ranked candidates resolution decides over (at least the delivered ones): "
                                    "below this width the decision does not change with top_k")
    out_of_force: int = Field(
        2, ge=0, le=10, description="passages outside valid_at (not yet or no longer in force) that the search "
                                    "without the valid_at filter ranks among its first resolution_pool candidates, "
                                    "which resolution rejects with their reason (0: off)")
    follow_up_dense: bool = Field(
        True, description="contradiction-search queries run the dense leg too (their encodings are batched); "
                          "off: BM25 only, no encoding, cheaper but noisier (README, Resolve)")


def candidate_width(settings: SearchSettings, requested: int | None, top_k: int) -> int:
    """The fused width handed to the second stage: the request's (server-capped upstream)
    or the configured one, never fewer than ``top_k``."""
    return max(requested or settings.candidate_width, top_k)


def with_candidate_width(settings: SearchSettings, requested: int | None, top_k: int) -> SearchSettings:
    """``settings`` with the candidate width one request asks for (the same object when unchanged)."""
    width = candidate_width(settings, requested, top_k)
    return settings if width == settings.candidate_width else settings.model_copy(update={"candidate_width": width})
