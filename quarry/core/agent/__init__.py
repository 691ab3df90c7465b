"""The agent contract: runs (the bounded search loop), fetch, citation checks."""
