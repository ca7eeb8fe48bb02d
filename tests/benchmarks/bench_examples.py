#!/usr/bin/env python
"""Step time of the FSDP2 example's model: world size 1 and 2, FSDP2 vs DDP.

    python tests/benchmarks/bench_examples.py                  # CPU/gloo (or CUDA if present)
    python tests/benchmarks/bench_examples.py --device cuda --worlds 1 2 4 8

A benchmark, not a test: it prints medians, asserts nothing.  The driver
launches itself under torchrun once per world size; each worker times the same
transformer (bigger than the examples' toy default) wrapped three ways:
DDP, FSDP2 (fully_shard per block + root, fp32), and FSDP2 with activation
checkpointing, as in scripts/fsdp2_train.py.  A step is forward, backward,
clipping and the optimizer step; its time is the slowest rank's, and the
reported figure is the median over the timed steps.  On CPU each rank gets
one thread (OMP_NUM_THREADS=1), so world size 2 needs 2 free cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.parallel import DistributedDataParallel as DDP

    import _dist_common as common
    import fsdp2_train
    from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy

    results = {}
    with common.distributed(args) as d:
        mesh = init_device_mesh(d.device.type, (d.world_size,))

        def build(kind):
            model = common.ToyTransformer(dim=args.dim, n_heads=8, n_layers=args.layers,
                                          max_seq=args.seq).to(d.device)
            model.init_weights(args.seed)
            if kind == "ddp":
                return DDP(model, device_ids=[d.device.index] if d.device.type != "cpu" else None)
            if kind == "fsdp2_ac":
                fsdp2_train.apply_ac(model)
            fsdp2_train.apply_fsdp(model, mesh, MixedPrecisionPolicy(), OffloadPolicy(), True)
            return model

        def sync():
            if d.device.type != "cpu":
                torch.accelerator.synchronize()

        for kind in ("ddp", "fsdp2", "fsdp2_ac"):
            model = build(kind)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            times = []
            for step in range(args.warmup + args.steps):
                x, y = (t.to(d.device) for t in common.token_batch(
                    args.seed, d.rank, step, args.batch_size, seq=args.seq))
                sync()
                t0 = time.perf_counter()
                common.lm_loss(model(x), y).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                sync()
                dt = torch.tensor([time.perf_counter() - t0])
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # a step is as slow as its slowest rank
                if step >= args.warmup:
                    times.append(dt.item())
            results[kind] = statistics.median(times)
            del model, opt
        if d.is_main:
            print("BENCH " + json.dumps({"world_size": d.world_size, "device": d.device.type,
                                         "backend": d.backend, "median_step_s": results}), flush=True)


def driver(args, passthrough: list[str]) -> None:
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    rows = []
    for world in args.worlds:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
               __file__, "--worker", *passthrough]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.launch_timeout)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("BENCH ")), None)
        if out.returncode or line is None:
            print(f"error: world size {world} failed (exit {out.returncode}): "
                  f"{(out.stderr.strip().splitlines() or ['no output'])[-1]}", file=sys.stderr)
            sys.exit(1)
        rows.append(json.loads(line[6:]))
    print(f"model: dim={args.dim} layers={args.layers} seq={args.seq} batch/rank={args.batch_size}; "
          f"median of {args.steps} steps after {args.warmup} warm-up, OMP_NUM_THREADS={env['OMP_NUM_THREADS']}")
    print(f"{'world':>5} {'device':>6} {'DDP ms':>9} {'FSDP2 ms':>9} {'FSDP2+AC ms':>12} {'FSDP2/DDP':>10}")
    for r in rows:
        m = r["median_step_s"]
        print(f"{r['world_size']:>5} {r['device']:>6} {m['ddp'] * 1e3:>9.1f} {m['fsdp2'] * 1e3:>9.1f} "
              f"{m['fsdp2_ac'] * 1e3:>12.1f} {m['fsdp2'] / m['ddp']:>10.2f}")
    print(json.dumps({"benchmark": "fsdp2_examples", "rows": rows}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--device", default="auto")
    p.add_argument("--backend", default="auto")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--launch-timeout", type=float, default=600.0)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    passthrough = [a for a in sys.argv[1:] if not a.startswith("--worlds")]
    # --worlds takes several values: strip them too.
    if "--worlds" in sys.argv:
        i = sys.argv.index("--worlds")
        j = i + 1
        while j < len(sys.argv) and not sys.argv[j].startswith("--"):
            j += 1
        passthrough = sys.argv[1:i] + sys.argv[j:]
    driver(args, passthrough)


if __name__ == "__main__":
    main()
