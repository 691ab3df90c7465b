"""Text units every stage shares: tokens, spans, sentences, headings, identifiers."""
