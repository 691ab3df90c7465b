"""One search call (DESIGN §4): ``settings`` (what is configurable), ``retrieval`` (mask,
BM25 and dense legs, RRF), ``survivors`` (the second stage's answer applied), ``expansion``,
``resolution``, and ``composer`` (the one order, over a stage-executor protocol) with its
in-process executor in ``in_process``. Imports core only, never serve, jobs or eval."""
