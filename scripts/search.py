#!/usr/bin/env python3
"""Search the PyTorch FSDP / torch.distributed references of this skill.

    python scripts/search.py "how do I shard a model with fully_shard" [--k 5] [--json]

Works from a checkout or an installed skill copy, from any directory, without installing the
package: it imports fsdp_skill from ../src next to this file. Run with --help for options.

In a plain copy of the skill (git clone, `npx skills add`: no index yet) the first search builds
the index when this Python has the build requirements, and otherwise prints one line with the
exact command that installs them. An unzipped `fsdp-skill bundle` ships its index and needs no
package at all.
"""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SRC = os.path.join(_ROOT, "src")
if os.path.isdir(os.path.join(_SRC, "fsdp_skill")):
    sys.path.insert(0, _SRC)

# Written by `fsdp-skill bundle`: the page files' original times, which unzipping loses (the
# index is fresh only for the exact files it was built from).
_BUNDLE_TIMES = os.path.join(_ROOT, "references", "index", "bundle-mtimes.tsv")


def _first_use_problem(argv):
    """None when the search can run; else one line saying what to install, and how.

    Only a missing index is checked here (one stat per query); a stale one is rebuilt by the
    search itself, which reports a missing requirement the same way.
    """
    if any(a in ("-h", "--help") for a in argv):
        return None
    from fsdp_skill import paths

    if os.path.exists(paths.index_path()):
        return None
    # The docstring pages come from torch; a copy that ships them builds the index without it.
    has_api_pages = os.path.exists(os.path.join(paths.page_dirs()["docstring"], "build-info.txt"))
    from fsdp_skill.skill.install import TORCH_REQUIREMENT, first_use_hint, missing_build_modules

    missing = missing_build_modules(with_torch=not has_api_pages)
    if not missing:
        return None  # the search builds the index (a few seconds, progress on stderr)
    return first_use_hint(
        ", ".join(missing),
        with_torch=TORCH_REQUIREMENT in missing,
        rerun=[os.path.abspath(__file__), *argv],
    )


if __name__ == "__main__":
    if os.path.exists(_BUNDLE_TIMES):
        from fsdp_skill.skill.bundle import restore_times

        restore_times(_ROOT)
    problem = _first_use_problem(sys.argv[1:])
    if problem:
        print(f"search.py: error: {problem}", file=sys.stderr)
        sys.exit(1)
    from fsdp_skill.search.cli import main

    sys.exit(main())
