"""The Serve deployments of the search path, one per module: ``retriever`` (the tenant
indexes, the first stage, the expansion and the evidence), ``reranker`` (the second stage)
and ``resolver`` (resolution, a pure function of the evidence); ``handles`` is the
composer's stage executor over their handles (what the Gateway runs a search with);
``generations`` the memory-mapped index generations the deployments share. Thin: the work
is ``quarry.core``. Payloads are the frozen records of ``quarry.core.search.records``."""
