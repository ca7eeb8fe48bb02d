#!/usr/bin/env python
"""Run the guide code blocks marked ``cuda`` (tests/guides/blocks.py) on one GPU.

    python tests/gpu/run_cuda_blocks.py          # each block alone, torchrun, world size 1
    python tests/gpu/run_cuda_blocks.py --list   # the blocks and their setups, nothing run

The CPU suite skips these blocks (NCCL needs a GPU). Each runs in its own
``torchrun --standalone --nproc-per-node 1`` launch of tests/guides/block_runner.py,
the same runner the CPU suite uses (same setups, same failure rules: an exception, or
a FutureWarning/DeprecationWarning unless the block is marked legacy). A block
written for world=N runs at world size 1 here, since one GPU is all this hook assumes;
the line says so. Exit 1 if any block failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "tests" / "guides"
sys.path.insert(0, str(GUIDES))

import blocks as blocks_mod  # noqa: E402

TIMEOUT_S = 180


def cuda_blocks() -> list:
    return [b for b in blocks_mod.all_blocks() if b.mode == "run" and b.cuda]


def run_one(b) -> str:
    payload = [
        {
            "id": b.id,
            "code": b.code,
            "setup": b.setup,
            "adapt": b.adapt,
            "raises": b.raises,
            "legacy": "legacy" in b.flags,
        }
    ]
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "blocks.json"
        spec.write_text(json.dumps(payload))
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=1",
            str(GUIDES / "block_runner.py"),
            str(spec),
            tmp,
        ]
        try:
            out = subprocess.run(
                cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return f"timed out after {TIMEOUT_S}s"
        got = Path(tmp) / "rank0.json"
        if not got.is_file():
            return f"no result (exit {out.returncode}): {out.stderr[-800:]}"
        return json.loads(got.read_text()).get(b.id, "no result for this block")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    found = cuda_blocks()
    sys.path.insert(0, str(GUIDES))
    import block_runner

    setups = set(block_runner._setups())
    missing = [f"{b.id}: setup {b.setup!r}" for b in found if b.setup and b.setup not in setups]
    if missing:
        print("unknown setups: " + ", ".join(missing), file=sys.stderr)
        return 1
    failed = 0
    for b in found:
        note = f" (written for world={b.world}, run at 1)" if b.world != 1 else ""
        if args.list:
            print(f"{b.id}{note}")
            continue
        err = run_one(b)
        failed += bool(err)
        print(
            f"[{'FAIL' if err else 'PASS'}] {b.id}{note}" + (f"\n{err}" if err else ""), flush=True
        )
    verb = "found" if args.list else f"run, {failed} failed"
    print(f"{len(found)} cuda block(s) {verb}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
