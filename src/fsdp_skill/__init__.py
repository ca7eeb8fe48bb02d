"""pytorch-fsdp agent skill: versioned torch.distributed references, BM25 search, examples.

Kept empty of imports on purpose: `scripts/search.py` imports this package on every query and
must start nearly as fast as a bare interpreter.
"""

__version__ = "0.1.0"
