"""Ingest: read sources, chunk by structure, enrich envelopes, contextualize; the in-process build."""
