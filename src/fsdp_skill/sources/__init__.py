"""Stage 1: where reference pages come from (the installed torch, the docs site)."""
