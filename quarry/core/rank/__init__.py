"""Second stages: reranking, the cross-encoder, the learned ranker, the promotion gate, ranking metrics."""
