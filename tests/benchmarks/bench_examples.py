#!/usr/bin/env python
"""Step time, tokens/s, peak memory and MFU of the FSDP2 example's model: FSDP2 vs DDP.

    python tests/benchmarks/bench_examples.py                  # CPU/gloo (or CUDA if present)
    python tests/benchmarks/bench_examples.py --device cuda --worlds 1 2 4 8
    python tests/benchmarks/bench_examples.py --device cuda --preset 1b --worlds 1 8
    python tests/benchmarks/bench_examples.py --dim 64 --layers 2 --seq 32 --steps 3 \\
        --peak-tflops 0.1                                      # CPU smoke test, seconds

A benchmark, not a test: it prints medians, asserts nothing.  The driver
launches itself under torchrun once per world size; each worker times the same
transformer (bigger than the examples' toy default) wrapped three ways:
DDP, FSDP2 (fully_shard per block + root), and FSDP2 with activation
checkpointing, as in scripts/fsdp2_train.py.  A step is forward, backward,
clipping and the optimizer step; its time is the slowest rank's, and the
reported figure is the median over the timed steps.  On CPU each rank gets
one thread (OMP_NUM_THREADS=1), so world size 2 needs 2 free cores.

Presets: ``small`` (default: dim 128, 4 layers, seq 64, vocab 64, batch 8 per
rank) and ``1b`` (dim 2048, 20 layers, 16 heads, seq 2048, vocab 32000, batch 4
per rank: 1,142,272,000 parameters).  Any explicit --dim/--layers/... flag
overrides the preset's value.

Precision (--precision auto): bf16 on CUDA, fp32 elsewhere.  bf16 means FSDP2
with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) and DDP under
torch.autocast(bf16), so both keep fp32 master weights and reduce gradients in
fp32.

Per world size and wrapping it reports: median step time; tokens/s (global
batch tokens / median step time); peak memory per rank
(torch.cuda.max_memory_allocated after reset_peak_memory_stats, taken once the
model is built, so it covers the training steps: sharded parameters, gradients,
optimizer state and activations; null on CPU); and MFU (model FLOPs
utilisation, see ``flops_per_token``).  The peak FLOP/s per device come from
--peak-tflops, else, on CUDA in bf16, from a small table keyed by
torch.cuda.get_device_name(); an unknown GPU then needs the flag.  On CPU the
MFU is printed only when --peak-tflops is given.

Rank 0 of each worker prints one ``BENCH {json}`` line; the driver collects
them into a table and one final JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

KINDS = ("ddp", "fsdp2", "fsdp2_ac")

PRESETS = {
    # The previous defaults of this benchmark (vocab = the examples' VOCAB).
    "small": {"dim": 128, "layers": 4, "heads": 8, "vocab": 64, "seq": 64, "batch_size": 8},
    # 20 x 50.4M per block + 65.5M token embedding + 4.2M positions + 65.5M output
    # = 1,142,272,000 parameters.  head_dim 128 (flash attention in bf16).
    "1b": {"dim": 2048, "layers": 20, "heads": 16, "vocab": 32000, "seq": 2048, "batch_size": 4},
}


def peak_tflops_for(device_name: str) -> float | None:
    """Dense bf16 peak TFLOP/s per GPU, from the vendor data sheets; None: unknown.

    Only the SXM-class parts: H100/H200 PCIe and NVL boards run lower clocks,
    so they need --peak-tflops.
    """
    name = device_name.upper()
    if "A100" in name:
        return 312.0
    if ("H100" in name or "H200" in name) and "PCIE" not in name and "NVL" not in name:
        return 989.0
    return None


def flops_per_token(n_params: int, n_layers: int, dim: int, seq: int) -> float:
    """Model FLOPs per trained token (forward + backward), as in the PaLM paper, app. B.

    6 * N: every parameter takes part in one multiply-add (2 FLOPs) per token
    in the forward pass and two in the backward (input and weight gradients).
    N is all parameters, as the issue specifies; the token and position
    embedding tables (lookups, not matmuls) make that ~6 % high for the 1b
    preset, which is why the JSON also carries the non-embedding count.
    12 * L * d * s: attention scores Q K^T and the weighted sum A V are
    2 * s * d FLOPs each per token and layer in the forward pass, x3 for
    forward + backward; the causal mask's skipped half is counted, as usual.
    Activation-checkpoint recomputation is *not* counted (model FLOPs, not
    hardware FLOPs), so FSDP2+AC shows a lower MFU for the same work.
    """
    return 6.0 * n_params + 12.0 * n_layers * dim * seq


def count_params(args) -> tuple[int, int]:
    """(all parameters, all but the embedding tables), from a meta-device build."""
    import _dist_common as common
    import torch

    with torch.device("meta"):
        m = common.ToyTransformer(vocab=args.vocab, dim=args.dim, n_heads=args.heads,
                                  n_layers=args.layers, max_seq=args.seq)
    n = sum(p.numel() for p in m.parameters())
    return n, n - m.tok_embeddings.weight.numel() - m.pos_embeddings.weight.numel()


def worker(args) -> None:
    import _dist_common as common
    import fsdp2_train
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy
    from torch.nn.parallel import DistributedDataParallel as DDP

    n_params, n_params_non_emb = count_params(args)
    fpt = flops_per_token(n_params, args.layers, args.dim, args.seq)
    results = {}
    with common.distributed(args) as d:  # picks and sets this local rank's device
        cuda = d.device.type == "cuda"
        bf16 = args.precision == "bf16" or (args.precision == "auto" and cuda)
        mesh = init_device_mesh(d.device.type, (d.world_size,))
        global_tokens = d.world_size * args.batch_size * args.seq

        def build(kind):
            # Built on meta, wrapped, then materialised on the device: FSDP2
            # allocates only its shards, and no rank holds a full CPU copy.
            with torch.device("meta"):
                model = common.ToyTransformer(vocab=args.vocab, dim=args.dim, n_heads=args.heads,
                                              n_layers=args.layers, max_seq=args.seq)
            if kind != "ddp":
                if kind == "fsdp2_ac":
                    fsdp2_train.apply_ac(model)
                mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                      if bf16 else MixedPrecisionPolicy())
                fsdp2_train.apply_fsdp(model, mesh, mp, OffloadPolicy(), True)
            model.to_empty(device=d.device)
            model.init_weights(args.seed)
            if kind == "ddp":
                # Same seed on every rank; DDP also broadcasts rank 0's weights.
                model = DDP(model, device_ids=[d.device.index] if d.device.type != "cpu" else None)
            return model

        def sync():
            if d.device.type != "cpu":
                torch.accelerator.synchronize(d.device)

        def forward_loss(kind, model, x, y):
            if kind == "ddp" and bf16:
                # DDP's counterpart of FSDP2's bf16 policy: fp32 weights and
                # fp32 gradient all-reduce, bf16 matmuls.
                with torch.autocast(device_type=d.device.type, dtype=torch.bfloat16):
                    logits = model(x)
            else:
                logits = model(x)
            return common.lm_loss(logits, y)

        for kind in args.kinds:
            model = build(kind)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            if cuda:
                sync()
                torch.cuda.reset_peak_memory_stats(d.device)
            times = []
            for step in range(args.warmup + args.steps):
                x, y = (t.to(d.device) for t in common.token_batch(
                    args.seed, d.rank, step, args.batch_size, vocab=args.vocab, seq=args.seq))
                sync()  # the copies and any queued work are done before the clock starts
                t0 = time.perf_counter()
                forward_loss(kind, model, x, y).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                sync()  # CUDA kernels are asynchronous: wait for them before reading the clock
                # On the device: NCCL has no CPU tensors.
                dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=d.device)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # a step is as slow as its slowest rank
                if step >= args.warmup:
                    times.append(dt.item())
            median = statistics.median(times)
            peak_mem = None
            if cuda:
                mem = torch.zeros(d.world_size, dtype=torch.float64, device=d.device)
                mem[d.rank] = torch.cuda.max_memory_allocated(d.device)
                dist.all_reduce(mem)  # every rank fills its own slot
                peak_mem = [int(v) for v in mem.tolist()]
            tokens_per_s = global_tokens / median
            # MFU: achieved model FLOP/s over the peak of all devices in the run.
            mfu = (tokens_per_s * fpt / (args.peak_tflops * 1e12 * d.world_size)
                   if args.peak_tflops else None)
            results[kind] = {"median_step_s": median, "tokens_per_s": tokens_per_s,
                             "peak_mem_bytes_per_rank": peak_mem, "mfu": mfu}
            del model, opt
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
        if d.is_main:
            print("BENCH " + json.dumps({
                "world_size": d.world_size, "device": d.device.type,
                "device_name": torch.cuda.get_device_name(d.device) if cuda else "cpu",
                "backend": d.backend, "precision": "bf16" if bf16 else "fp32",
                "n_params": n_params, "n_params_non_embedding": n_params_non_emb,
                "global_batch_tokens": global_tokens, "flops_per_token": fpt,
                "peak_tflops": args.peak_tflops,
                "median_step_s": {k: v["median_step_s"] for k, v in results.items()},
                "results": results}), flush=True)


def resolve_device(arg: str) -> str:
    """The device type the workers will pick, without creating a CUDA context here."""
    if arg != "auto":
        return arg.split(":")[0]
    import torch

    return torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"


def gpu_name() -> str | None:
    """GPU 0's name, None when no CUDA GPU is visible.

    Asked in a child process, so the driver never holds a CUDA context on GPU 0.
    """
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_name(0))"],
                         check=False, capture_output=True, text=True, timeout=120)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _cause(stderr: str) -> str:
    """The workers' first exception line, not torchrun's closing banner."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if re.match(r"^(\[rank\d+\]:\s*)?[\w.]*(Error|Exception)\b.*: ", ln) and "ChildFailedError" not in ln:
            return ln
    return next((ln for ln in reversed(lines) if set(ln) - set("=-")), "no output")


def driver(args, p: argparse.ArgumentParser) -> None:
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    device = resolve_device(args.device)
    bf16 = args.precision == "bf16" or (args.precision == "auto" and device == "cuda")
    if args.peak_tflops is None and device == "cuda":
        name = gpu_name()
        if name is None:
            p.error("--device cuda, but no CUDA GPU is visible")
        if bf16:
            args.peak_tflops = peak_tflops_for(name)
            if args.peak_tflops is None:
                p.error(f"no bf16 peak known for GPU {name!r}; pass --peak-tflops (dense, per GPU)")
        else:
            print(f"note: fp32 on {name}: the table holds bf16 peaks only; "
                  "MFU needs --peak-tflops", file=sys.stderr)
    n_params, n_non_emb = count_params(args)
    worker_args = ["--device", args.device, "--backend", args.backend, "--precision", args.precision,
                   "--dim", str(args.dim), "--layers", str(args.layers), "--heads", str(args.heads),
                   "--vocab", str(args.vocab), "--seq", str(args.seq),
                   "--batch-size", str(args.batch_size), "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--seed", str(args.seed),
                   "--timeout-s", str(args.timeout_s), "--kinds", *args.kinds]
    if args.peak_tflops is not None:
        worker_args += ["--peak-tflops", repr(args.peak_tflops)]
    rows = []
    for world in args.worlds:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
               __file__, "--worker", *worker_args]
        out = subprocess.run(cmd, env=env, check=False, capture_output=True, text=True, timeout=args.launch_timeout)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("BENCH ")), None)
        if out.returncode or line is None:
            print(f"error: world size {world} failed (exit {out.returncode}): {_cause(out.stderr)}",
                  file=sys.stderr)
            sys.exit(1)
        rows.append(json.loads(line[6:]))

    precision = rows[0]["precision"]
    print(f"model: preset={args.preset} dim={args.dim} layers={args.layers} heads={args.heads} "
          f"vocab={args.vocab} seq={args.seq} batch/rank={args.batch_size}; "
          f"params={n_params:,} (non-embedding {n_non_emb:,}); {precision}; "
          f"median of {args.steps} steps after {args.warmup} warm-up, OMP_NUM_THREADS={env['OMP_NUM_THREADS']}")
    print(f"device: {rows[0]['device_name']}; peak "
          + (f"{args.peak_tflops:g} TFLOP/s per device" if args.peak_tflops else "n/a (no MFU)")
          + f"; model FLOPs/token = 6*N + 12*L*d*s = {rows[0]['flops_per_token']:.4g}")
    print(f"{'world':>5} {'kind':>9} {'step ms':>10} {'tokens/s':>12} {'peak GiB/rank':>14} "
          f"{'MFU %':>7} {'vs DDP':>7}")
    for r in rows:
        res = r["results"]
        for kind in args.kinds:
            m = res[kind]
            mem = (f"{max(m['peak_mem_bytes_per_rank']) / 2**30:.2f}"
                   if m["peak_mem_bytes_per_rank"] else "-")
            mfu = f"{m['mfu'] * 100:.1f}" if m["mfu"] is not None else "-"
            vs = (f"{m['median_step_s'] / res['ddp']['median_step_s']:.2f}"
                  if "ddp" in res else "-")
            print(f"{r['world_size']:>5} {kind:>9} {m['median_step_s'] * 1e3:>10.1f} "
                  f"{m['tokens_per_s']:>12,.0f} {mem:>14} {mfu:>7} {vs:>7}")
    print(json.dumps({"benchmark": "fsdp2_examples",
                      "config": {"preset": args.preset, "dim": args.dim, "layers": args.layers,
                                 "heads": args.heads, "vocab": args.vocab, "seq": args.seq,
                                 "batch_size_per_rank": args.batch_size, "steps": args.steps,
                                 "warmup": args.warmup, "precision": precision,
                                 "n_params": n_params, "peak_tflops": args.peak_tflops},
                      "rows": rows}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--device", default="auto")
    p.add_argument("--backend", default="auto")
    p.add_argument("--preset", choices=sorted(PRESETS), default="small",
                   help="model size; explicit --dim/--layers/--heads/--vocab/--seq/--batch-size win")
    p.add_argument("--dim", type=int, default=None, help="default: the preset's")
    p.add_argument("--layers", type=int, default=None, help="default: the preset's")
    p.add_argument("--heads", type=int, default=None, help="default: the preset's")
    p.add_argument("--vocab", type=int, default=None, help="default: the preset's")
    p.add_argument("--seq", type=int, default=None, help="default: the preset's")
    p.add_argument("--batch-size", type=int, default=None, help="per rank; default: the preset's")
    p.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                   help="auto: bf16 on CUDA, fp32 elsewhere")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="peak TFLOP/s per device for MFU; default on CUDA in bf16: looked up from "
                        "the GPU's name (H100/H200 SXM 989, A100 312); on CPU: no MFU")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                   help="wrappings to time (drop ddp if a full replica does not fit)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--launch-timeout", type=float, default=600.0)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.dim % args.heads:
        p.error(f"--dim {args.dim} is not divisible by --heads {args.heads}")
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        p.error("--peak-tflops must be > 0")
    if args.worker:
        worker(args)
        return
    driver(args, p)


if __name__ == "__main__":
    main()
