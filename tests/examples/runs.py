"""Several runs of the examples in one torchrun launch (see example_helpers.run_many).

    torchrun --nproc-per-node N tests/examples/runs.py RUNS.json OUT_DIR

A launch costs a torch import in the agent and in every rank: several CPU-seconds each, far
more than one of these small runs. Here each rank imports torch once and runs, one after the
other, every entry of RUNS.json, a list of {"script": ..., "args": [...], "env": {...},
"probe": bool}, as `torchrun ... <script> <args>` runs it, with the run's variables set and
the fp32 math settings back at the launch's:

- "script" a module name (scripts/ or this folder): an example built on _dist_common, run by
  `common.run(main, args)`, the entry point of its `__main__` block (a bad launch is one line
  on stderr and exit code 2), less the hard exit at the end; with "probe", probe.py's
  instruments on (probe.run);
- "script" the path of a standalone copy: the file itself as `__main__` (runpy), with
  sys.argv set, imported from its own folder only, so it still shows it needs nothing else.

Each run gets a process group of its own on torchrun's store: the examples built on
_dist_common take a fresh key prefix for every start (launch_number); for the standalone
ones, whose init_process_group reads torchrun's variables, the second and later groups get a
prefix of their own (tests/group_stores.py), or they would meet the keys an earlier one left.

Rank R writes what run I prints to OUT_DIR/run<I>.rank<R>.out and, once the run has finished,
OUT_DIR/run<I>.rank<R>.json ({"probe": its probe record or null}). A run that raises or exits
non-zero ends the rank with that error, as it would end the script's own process; the missing
.json files then say which runs never finished. OUT_DIR/started.rank<R> is written first.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import os
import runpy
import sys
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parents[1] / "scripts"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from group_stores import own_group_store  # noqa: E402


def run_one(r: dict) -> dict | None:
    """Run entry r; its probe record, if probed."""
    script, args = r["script"], r["args"]
    if script.endswith(".py"):
        saved = sys.argv
        sys.argv = [script, *args]
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (0, None):
                raise
        finally:
            sys.argv = saved
        return None
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    mod = importlib.import_module(script)
    if r.get("probe"):
        import probe

        probe.install()
        return probe.run(mod, args)
    mod.common.run(mod.main, args)
    return None


def main() -> None:
    runs = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    # Process-wide switches a run may flip (--check-parity turns TF32 off): each run starts
    # from the launch's, as its own process would.
    fp32 = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    # The rank came up: from here on, a run without its .json is one that never finished.
    (out / f"started.rank{rank}").touch()
    for i, r in enumerate(runs):
        torch.set_float32_matmul_precision(fp32[0])
        torch.backends.cudnn.allow_tf32 = fp32[1]
        # A file, not a buffer: what a run printed before it died is still there.
        with (
            open(out / f"run{i}.rank{rank}.out", "w", buffering=1) as printed,
            mock.patch.dict(os.environ, r.get("env", {})),
            own_group_store(datetime.timedelta(seconds=60)),
            contextlib.redirect_stdout(printed),
        ):
            record = run_one(r)
        (out / f"run{i}.rank{rank}.tmp").write_text(json.dumps({"probe": record}))
        os.replace(out / f"run{i}.rank{rank}.tmp", out / f"run{i}.rank{rank}.json")
    sys.stdout.flush()
    os._exit(0)  # as the examples do after gloo: skip a teardown that can abort under load


if __name__ == "__main__":
    main()
