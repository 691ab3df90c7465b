"""Evidence resolution: statements, conditions, instruction-shaped text, the evidence graph, the resolver."""
