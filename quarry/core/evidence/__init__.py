"""Evidence resolution: statements, conditions, instruction-shaped text, the evidence graph, the resolver.

In pipeline order:

- value statements: ``statement`` (the record); ``sentences`` (which sentences are read),
  ``quantities`` (values and units), ``anchors`` (what a value is of), ``statements`` (the
  entry: scope, equivalents, one statement per value); ``predicates`` (owner, status and
  date facts); ``subjects`` (synonyms, concept keys, same subject) and ``conflict`` (the
  conflict rule);
- ``conditions`` (stopping conditions against events) and ``injection`` (text that tells
  the reader to disregard evidence);
- ``graph``: the facts each shard stores and the links between passages;
- the resolver: ``rules`` (dates, supersession, stopping conditions), ``disputes``
  (conflicts by scope and authority), ``question`` (which survivors answer the question),
  ``resolve`` (the entry: the ``Decision`` and the follow-up queries).
"""
