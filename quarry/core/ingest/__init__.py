"""Ingest: read sources, chunk by structure, enrich envelopes, contextualize; the in-process build.

In pipeline order:

- ``sources``: source records read and validated into ``SourceDocument``;
- ``enrich`` (the entry) with ``enrich_conditions``, ``enrich_events``,
  ``enrich_supersession`` and ``enrich_validity``: envelope fields a source left empty,
  from its text;
- ``chunking`` (the entry) with ``chunk_sections``, ``chunk_blocks`` and
  ``chunk_packing``: passages and parent sections;
- ``contextualize`` (the protocol, kinds and cost account) with
  ``contextualize_extractive``, ``contextualize_llm`` (and its ``contextualize_llm_prompt``)
  and ``contextualize_factory``: a preamble per passage;
- ``pipeline``: the in-process build that runs these steps.
"""
