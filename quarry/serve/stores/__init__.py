"""Serving state: the run stores (actor, Redis) and the append-only trace store."""
