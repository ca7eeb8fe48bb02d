"""Check one repro module by hand: `python tests/errors/check_area.py repro_ddp [--search]`.

Runs the module's repros, prints per entry whether the catalog message matches what torch
printed and, with --search, the rank of the entry when its traceback is pasted into the search.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import catalog  # noqa: E402
import test_catalog as tc  # noqa: E402


def main(argv: list[str]) -> int:
    module = argv[0]
    want_search = "--search" in argv
    worlds = sorted(
        {r.world for r in tc.REPROS.values() if r.module == module and r.device == "cpu"}
    )
    printed: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for w in worlds:
            printed.update(tc.run_group(module, w, "cpu", Path(tmp) / str(w)))
    index = None
    if want_search:
        from fsdp_skill.search.engine import open_fresh

        index = open_fresh(tc.ROOT)
    bad = 0
    for rid, r in sorted(tc.REPROS.items()):
        if r.module != module or r.device != "cpu":
            continue
        e = tc.BY_ID.get(rid)
        got = printed.get(rid, [])
        texts = [g["text"] for g in got]
        ok = bool(e) and any(catalog.matches(e.message, t) for t in texts)
        line = f"{'OK  ' if ok else 'FAIL'} {rid}"
        if index is not None and e and ok:
            tb = next(g for g in got if catalog.matches(e.message, g["text"]))
            line += f"  search rank: {tc._rank_of(index, e, tb['traceback'] or tb['text'])}"
        print(line)
        if not ok:
            bad += 1
            print("   catalog:", (e.message if e else "(no catalog entry)")[:300])
            for t in texts:
                print("   printed:", t[:600])
    if "__launch__" in printed:
        print("launch:", printed["__launch__"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
