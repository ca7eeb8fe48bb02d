"""Stage 4: tokenization shared with the query path, BM25+ term weights, the index file."""
