"""Stage 5, the query path: query terms and expansion, BM25 ranking over the index, rendering.

Empty of imports on purpose: `scripts/search.py` loads this package on every question, and
each module here imports only the standard library and the index reader.
"""
