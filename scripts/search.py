#!/usr/bin/env python3
"""Search the PyTorch FSDP / torch.distributed references of this skill.

    python scripts/search.py "how do I shard a model with fully_shard" [--k 5] [--json]

Works from a checkout or an installed skill copy, from any directory, without installing the
package: it imports fsdp_skill from ../src next to this file. Run with --help for options.
"""

import os
import sys

_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if os.path.isdir(os.path.join(_SRC, "fsdp_skill")):
    sys.path.insert(0, _SRC)

from fsdp_skill.search_cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
