"""Quarry: multi-tenant evidence retrieval for AI agents."""
__version__ = "0.1.0"
