"""Changes after a build: the change log, delta generations, compaction, reconciliation."""
