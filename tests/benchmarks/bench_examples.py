#!/usr/bin/env python
"""Step time, tokens/s, peak memory and MFU of the FSDP2 example's model, wrapped several ways.

    python tests/benchmarks/bench_examples.py                  # CPU/gloo (or CUDA if present)
    python tests/benchmarks/bench_examples.py --device cuda --worlds 1   # one GPU: every row
    python tests/benchmarks/bench_examples.py --device cuda --preset 1b --worlds 1 8
    python tests/benchmarks/bench_examples.py --dim 64 --layers 2 --seq 32 --steps 3 \\
        --peak-tflops 0.1                                      # CPU smoke test, seconds

A benchmark, not a test: it asserts nothing.  The driver launches itself under
torchrun once per world size; each worker builds the same transformer (the
examples' ToyTransformer, bigger) once per row and times it.  Rows (--kinds):

  plain             no wrapper (world size 1 only) autocast bf16 (fp32 with --precision fp32)
  ddp               DDP, gradient_as_bucket_view   autocast bf16
  fsdp2             fully_shard per block + root   autocast bf16, fp32 parameters: the same
                                                   precision as plain and ddp, so the three
                                                   differ only by the wrapper
  fsdp2_bf16        as fsdp2, MixedPrecisionPolicy(param bf16, reduce fp32) instead of
                    autocast: scripts/fsdp2_train.py's default (norms and the residual
                    stream are bf16 too, so it is not like-for-like with ddp)
  fsdp2_ac          fsdp2_bf16 + activation checkpointing per block, explicit prefetch
  fsdp2_no_reshard  fsdp2_bf16, reshard_after_forward=False (blocks stay gathered)
  fsdp2_offload     fsdp2_bf16 + CPUOffloadPolicy(pin_memory=True)          (CUDA only)
  fsdp2_compile     fsdp2_bf16 + torch.compile per block, before fully_shard (CUDA only)
  fsdp2_fp32        fsdp2 in fp32, TF32 off
  fsdp2_tf32        fsdp2 in fp32, TF32 on                                   (CUDA only)

On one GPU (world size 1) nothing is communicated: the rows then measure
wrapper and copy overhead, activation checkpointing, resharding, offload,
precision and compile, not sharding's communication or scaling; a world size
above the visible GPU count is skipped (its row says so) and the other rows stay.

Timing: ``--warmup`` steps, then ``--steps`` steps between two device
synchronisations (per-step syncs would hide the CPU/GPU overlap FSDP2
relies on); the step time is that window's mean, of the slowest rank.  The
first warm-up step's time is reported too (it includes torch.compile).
A step is forward, backward, clipping and the optimizer step.

Memory (CUDA): peak allocated and peak reserved bytes after
``reset_peak_memory_stats`` once the row's model exists (so parameters,
gradients, optimizer state and activations of the steps), and the caching
allocator's alloc retries, the maximum over ranks.  Rows run one after
another in one process, so allocator and cuBLAS state carry over.

MFU: model FLOPs per token as torchtitan counts them,
6 * (parameters - embedding parameters) + 12 * layers * dim * seq (PaLM,
app. B; embedding tables are lookups, not matmuls; attention's causal half
is counted); recomputation under AC is not (model FLOPs, not hardware
FLOPs).  The peak FLOP/s per device come from --peak-tflops, else on CUDA
in bf16 from the GPU's name; fp32 rows use the same bf16 peak, so their MFU
only compares rows.  Rank 0 of each worker prints one ``BENCH {json}`` line;
the driver prints each world size's rows as they come, one final JSON line,
and with --json-out writes that JSON to a file.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

# kind -> (wrapper, precision method, ac, reshard_after_forward, offload, compile, CUDA only)
KINDS = {
    "plain": ("plain", "autocast", False, True, False, False, False),
    "ddp": ("ddp", "autocast", False, True, False, False, False),
    "fsdp2": ("fsdp2", "autocast", False, True, False, False, False),
    "fsdp2_bf16": ("fsdp2", "policy", False, True, False, False, False),
    "fsdp2_ac": ("fsdp2", "policy", True, True, False, False, False),
    "fsdp2_no_reshard": ("fsdp2", "policy", False, False, False, False, False),
    "fsdp2_offload": ("fsdp2", "policy", False, True, True, False, True),
    "fsdp2_compile": ("fsdp2", "policy", False, True, False, True, True),
    "fsdp2_fp32": ("fsdp2", "fp32", False, True, False, False, False),
    "fsdp2_tf32": ("fsdp2", "tf32", False, True, False, False, True),
}

PRESETS = {
    # The previous defaults of this benchmark (vocab = the examples' VOCAB).
    "small": {"dim": 128, "layers": 4, "heads": 8, "vocab": 64, "seq": 64, "batch_size": 8},
    # 12 x 12.6M per block + 32.8M token embedding + 1M positions + 32.8M output
    # = 217,749,504 parameters: every row fits one GPU in seconds (tests/gpu/run.sh).
    "200m": {"dim": 1024, "layers": 12, "heads": 8, "vocab": 32000, "seq": 1024, "batch_size": 8},
    # 20 x 50.4M per block + 65.5M token embedding + 4.2M positions + 65.5M output
    # = 1,142,272,000 parameters.  head_dim 128 (flash attention in bf16).
    "1b": {"dim": 2048, "layers": 20, "heads": 16, "vocab": 32000, "seq": 2048, "batch_size": 4},
}


def peak_tflops_for(device_name: str) -> float | None:
    """Dense bf16 peak TFLOP/s per GPU, from the vendor data sheets; None: unknown.

    As torchtitan's get_peak_flops: H100/H200 SXM 989, H100 NVL 835, H100 PCIe 756, A100 312.
    """
    name = device_name.upper()
    if "A100" in name:
        return 312.0
    if "H100" in name or "H200" in name:
        if "NVL" in name:
            return 835.0
        if "PCIE" in name:
            return 756.0
        return 989.0
    return None


def flops_per_token(n_params_non_embedding: int, n_layers: int, dim: int, seq: int) -> float:
    """Model FLOPs per trained token (forward + backward), torchtitan's convention.

    6 * N: every matmul weight takes part in one multiply-add (2 FLOPs) per token in
    forward and two in backward (input and weight gradients); N excludes the
    embedding tables, which are lookups.  12 * L * d * s: attention scores Q K^T and
    the weighted sum A V are 2 * s * d FLOPs each per token and layer in forward,
    x3 for forward + backward.
    """
    return 6.0 * n_params_non_embedding + 12.0 * n_layers * dim * seq


def count_params(args) -> tuple[int, int]:
    """(all parameters, all but the embedding tables), from a meta-device build."""
    import _dist_common as common
    import torch

    with torch.device("meta"):
        m = common.ToyTransformer(
            vocab=args.vocab,
            dim=args.dim,
            n_heads=args.heads,
            n_layers=args.layers,
            max_seq=args.seq,
        )
    n = sum(p.numel() for p in m.parameters())
    emb = sum(
        p.numel()
        for mod in m.modules()
        if isinstance(mod, torch.nn.Embedding)
        for p in mod.parameters()
    )
    return n, n - emb


def kinds_for(device: str, asked: list[str] | None) -> list[str]:
    cuda = device == "cuda"
    if asked:
        return [k for k in asked if cuda or not KINDS[k][6]]
    return [k for k, spec in KINDS.items() if cuda or not spec[6]]


def environment(torch, cuda: bool, device) -> dict:
    env = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
    }
    if cuda:
        props = torch.cuda.get_device_properties(device)
        env.update(
            nccl=".".join(map(str, torch.cuda.nccl.version())),
            total_memory_bytes=props.total_memory,
            sm_count=props.multi_processor_count,
        )
    return env


def worker(args) -> None:
    import _dist_common as common
    import fsdp2_train
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
    from torch.nn.parallel import DistributedDataParallel as DDP

    n_params, n_non_emb = count_params(args)
    fpt = flops_per_token(n_non_emb, args.layers, args.dim, args.seq)
    results = {}
    # A CPU backend next to NCCL only when an offload row needs it (clipping host gradients).
    with common.distributed(args, cpu_collectives="fsdp2_offload" in (args.kinds or ())) as d:
        cuda = d.device.type == "cuda"
        bf16 = args.precision == "bf16" or (args.precision == "auto" and cuda)
        mesh = init_device_mesh(d.device.type, (d.world_size,))
        global_tokens = d.world_size * args.batch_size * args.seq

        def build(kind):
            wrapper, method, ac, reshard, offload, compiled, _ = KINDS[kind]
            # Built on meta, wrapped, then materialised: FSDP2 allocates only its shards.
            with torch.device("meta"):
                model = common.ToyTransformer(
                    vocab=args.vocab,
                    dim=args.dim,
                    n_heads=args.heads,
                    n_layers=args.layers,
                    max_seq=args.seq,
                )
            if wrapper == "fsdp2":
                if ac:
                    fsdp2_train.apply_ac(model)
                if compiled:
                    # torchtitan's order: AC, then compile per block, then fully_shard.
                    for name, block in model.layers.named_children():
                        model.layers.register_module(name, torch.compile(block))
                mp = (
                    MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                    if method == "policy" and bf16
                    else MixedPrecisionPolicy()
                )
                fsdp2_train.apply_fsdp(
                    model,
                    mesh,
                    mp,
                    CPUOffloadPolicy(pin_memory=True) if offload else OffloadPolicy(),
                    reshard,
                )
                if ac:
                    fsdp2_train.apply_prefetch(model)
            fsdp2_train.materialize(model, d.device, offload)
            model.init_weights(args.seed)
            if wrapper == "ddp":
                # Bucket views: no second copy of the gradients (which would inflate DDP's memory).
                model = DDP(
                    model,
                    device_ids=[d.device.index] if cuda else None,
                    gradient_as_bucket_view=True,
                )
            return model

        def sync():
            if cuda:
                torch.accelerator.synchronize(d.device)

        def precision_context(kind):
            if KINDS[kind][1] == "autocast" and bf16:
                return torch.autocast(device_type=d.device.type, dtype=torch.bfloat16)
            return contextlib.nullcontext()

        def measure(kind):
            # The legacy setters, as common.exact_fp32 explains: torch 2.13 raises when
            # inductor later reads get_float32_matmul_precision() after the APIs were mixed.
            tf32 = KINDS[kind][1] == "tf32"
            torch.set_float32_matmul_precision("high" if tf32 else "highest")
            torch.backends.cudnn.allow_tf32 = tf32
            t_build = time.perf_counter()
            model = build(kind)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            build_s = time.perf_counter() - t_build
            if cuda:
                sync()
                torch.cuda.reset_peak_memory_stats(d.device)

            def step(i):
                x, y = (
                    t.to(d.device, non_blocking=True)
                    for t in common.token_batch(
                        args.seed, d.rank, i, args.batch_size, vocab=args.vocab, seq=args.seq
                    )
                )
                with precision_context(kind):
                    logits = model(x)
                common.lm_loss(logits, y).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)

            sync()
            t0 = time.perf_counter()
            step(0)
            sync()
            first = time.perf_counter() - t0
            for i in range(1, args.warmup):
                step(i)
            sync()
            t0 = time.perf_counter()
            for i in range(args.warmup, args.warmup + args.steps):
                step(i)
            sync()
            # On the device: NCCL has no CPU tensors. MAX: a step is as slow as its slowest rank.
            timing = torch.tensor(
                [(time.perf_counter() - t0) / args.steps, first],
                dtype=torch.float64,
                device=d.device,
            )
            dist.all_reduce(timing, op=dist.ReduceOp.MAX)
            step_s, first_s = timing.tolist()
            mem = {"peak_allocated_bytes": None, "peak_reserved_bytes": None, "alloc_retries": None}
            if cuda:
                stats = torch.cuda.memory_stats(d.device)
                m = torch.tensor(
                    [
                        torch.cuda.max_memory_allocated(d.device),
                        torch.cuda.max_memory_reserved(d.device),
                        stats.get("num_alloc_retries", 0),
                    ],
                    dtype=torch.float64,
                    device=d.device,
                )
                dist.all_reduce(m, op=dist.ReduceOp.MAX)
                mem = dict(zip(mem, (int(v) for v in m.tolist())))
            tokens_per_s = global_tokens / step_s
            mfu = (
                tokens_per_s * fpt / (args.peak_tflops * 1e12 * d.world_size)
                if args.peak_tflops
                else None
            )
            return {
                "step_s": step_s,
                "first_step_s": first_s,
                "build_s": build_s,
                "tokens_per_s": tokens_per_s,
                "mfu": mfu,
                **mem,
            }

        for kind in args.kinds:
            if KINDS[kind][0] == "plain" and d.world_size > 1:
                continue  # unsynchronised replicas: a world-size-1 baseline only
            try:
                results[kind] = measure(kind)
            except Exception as e:  # noqa: BLE001 - one failing row must not cost the others
                results[kind] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
        if d.is_main:
            print(
                "BENCH "
                + json.dumps(
                    {
                        "world_size": d.world_size,
                        "device": d.device.type,
                        "backend": d.pg_backend,
                        "precision": "bf16" if bf16 else "fp32",
                        "environment": environment(torch, cuda, d.device),
                        "n_params": n_params,
                        "n_params_non_embedding": n_non_emb,
                        "global_batch_tokens": global_tokens,
                        "flops_per_token": fpt,
                        "peak_tflops": args.peak_tflops,
                        "results": results,
                    }
                ),
                flush=True,
            )


def resolve_device(arg: str) -> str:
    """The device type the workers will pick, without creating a CUDA context here."""
    if arg != "auto":
        return arg.split(":")[0]
    import torch

    return (
        torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
    )


def gpu_info() -> tuple[str | None, int]:
    """(GPU 0's name, visible GPU count), (None, 0) without CUDA GPUs.

    Asked in a child process, so the driver never holds a CUDA context on GPU 0.
    """
    code = "import torch; n = torch.cuda.device_count(); print(n); print(torch.cuda.get_device_name(0) if n else '')"
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    lines = out.stdout.split("\n")
    if out.returncode or not lines[0].strip().isdigit() or int(lines[0]) == 0:
        return None, 0
    return lines[1].strip(), int(lines[0])


def _cause(stderr: str) -> str:
    """The workers' first exception line, not torchrun's closing banner."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if (
            re.match(r"^(\[rank\d+\]:\s*)?[\w.]*(Error|Exception)\b.*: ", ln)
            and "ChildFailedError" not in ln
        ):
            return ln
    return next((ln for ln in reversed(lines) if set(ln) - set("=-")), "no output")


def _gib(v) -> str:
    return f"{v / 2**30:.2f}" if v is not None else "-"


def print_rows(r: dict, kinds: list[str]) -> None:
    res = r["results"]
    base = next((res[k] for k in ("plain", "ddp") if "step_s" in res.get(k, {})), None)
    for kind in (k for k in kinds if k in res):
        m = res[kind]
        if "error" in m:
            print(f"{r['world_size']:>5} {kind:>16} error: {m['error']}", flush=True)
            continue
        mfu = f"{m['mfu'] * 100:.1f}" if m["mfu"] is not None else "-"
        vs = f"{m['step_s'] / base['step_s']:.2f}" if base else "-"
        print(
            f"{r['world_size']:>5} {kind:>16} {m['step_s'] * 1e3:>9.1f} {m['first_step_s']:>8.2f} "
            f"{m['tokens_per_s']:>12,.0f} {_gib(m['peak_allocated_bytes']):>9} "
            f"{_gib(m['peak_reserved_bytes']):>9} {mfu:>6} {vs:>7}",
            flush=True,
        )


def driver(args, p: argparse.ArgumentParser) -> int:
    device = resolve_device(args.device)
    env = dict(os.environ)
    if device == "cpu":
        # One thread per rank: world size 2 needs 2 free cores. On GPUs the CPU side (init,
        # the offloaded optimizer step) keeps all the threads it can get.
        env.setdefault("OMP_NUM_THREADS", "1")
    bf16 = args.precision == "bf16" or (args.precision == "auto" and device == "cuda")
    visible = None
    if device == "cuda":
        name, visible = gpu_info()
        if name is None:
            p.error("--device cuda, but no CUDA GPU is visible")
        if args.peak_tflops is None:
            args.peak_tflops = peak_tflops_for(name)
            if args.peak_tflops is None:
                print(
                    f"note: no bf16 peak known for GPU {name!r}: no MFU (pass --peak-tflops)",
                    file=sys.stderr,
                )
    kinds = kinds_for(device, args.kinds)
    n_params, n_non_emb = count_params(args)
    worker_args = [
        "--device",
        args.device,
        "--backend",
        args.backend,
        "--precision",
        args.precision,
        "--dim",
        str(args.dim),
        "--layers",
        str(args.layers),
        "--heads",
        str(args.heads),
        "--vocab",
        str(args.vocab),
        "--seq",
        str(args.seq),
        "--batch-size",
        str(args.batch_size),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--seed",
        str(args.seed),
        "--timeout-s",
        str(args.timeout_s),
        "--kinds",
        *kinds,
    ]
    if args.peak_tflops is not None:
        worker_args += ["--peak-tflops", repr(args.peak_tflops)]
    fpt = flops_per_token(n_non_emb, args.layers, args.dim, args.seq)
    print(
        f"model: preset={args.preset} dim={args.dim} layers={args.layers} heads={args.heads} "
        f"vocab={args.vocab} seq={args.seq} batch/rank={args.batch_size}; "
        f"params={n_params:,} (non-embedding {n_non_emb:,}); {'bf16' if bf16 else 'fp32'}; "
        f"mean of {args.steps} steps after {args.warmup} warm-up; OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', '-')}"
    )
    print(
        f"MFU: model FLOPs/token = 6*N(non-embedding) + 12*L*d*s = {fpt:.4g} "
        f"(6*N with embeddings: {6.0 * n_params + 12.0 * args.layers * args.dim * args.seq:.4g}); peak "
        + (f"{args.peak_tflops:g} TFLOP/s per device" if args.peak_tflops else "n/a (no MFU)")
    )
    print(
        f"{'world':>5} {'kind':>16} {'step ms':>9} {'first s':>8} {'tokens/s':>12} {'alloc GiB':>9} "
        f"{'resv GiB':>9} {'MFU %':>6} {'vs base':>7}",
        flush=True,
    )
    rows, skipped, failed = [], [], []
    for world in args.worlds:
        if visible is not None and world > visible:
            skipped.append(
                {"world_size": world, "reason": f"needs {world} GPUs, {visible} visible"}
            )
            print(f"{world:>5} {'(skipped)':>16} needs {world} GPUs, {visible} visible", flush=True)
            continue
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={world}",
            __file__,
            "--worker",
            *worker_args,
        ]
        try:
            out = subprocess.run(
                cmd,
                env=env,
                check=False,
                capture_output=True,
                text=True,
                timeout=args.launch_timeout,
            )
            line = next((ln for ln in out.stdout.splitlines() if ln.startswith("BENCH ")), None)
            cause = _cause(out.stderr) if out.returncode or line is None else None
        except subprocess.TimeoutExpired:
            line, cause = None, f"timed out after {args.launch_timeout:g}s"
        if cause:
            failed.append({"world_size": world, "error": cause})
            print(f"error: world size {world} failed: {cause}", file=sys.stderr, flush=True)
            continue
        rows.append(json.loads(line[6:]))
        print_rows(rows[-1], kinds)
    record = {
        "benchmark": "fsdp2_examples",
        "config": {
            "preset": args.preset,
            "dim": args.dim,
            "layers": args.layers,
            "heads": args.heads,
            "vocab": args.vocab,
            "seq": args.seq,
            "batch_size_per_rank": args.batch_size,
            "steps": args.steps,
            "warmup": args.warmup,
            "precision": "bf16" if bf16 else "fp32",
            "n_params": n_params,
            "n_params_non_embedding": n_non_emb,
            "flops_per_token": fpt,
            "peak_tflops": args.peak_tflops,
            "kinds": kinds,
        },
        "rows": rows,
        "skipped": skipped,
        "failed": failed,
    }
    print(json.dumps(record))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(record, indent=1))
    errors = [k for r in rows for k, m in r["results"].items() if "error" in m]
    return 1 if failed or errors or not rows else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--device", default="auto")
    p.add_argument("--backend", default="auto")
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="small",
        help="model size; explicit --dim/--layers/--heads/--vocab/--seq/--batch-size win",
    )
    p.add_argument("--dim", type=int, default=None, help="default: the preset's")
    p.add_argument("--layers", type=int, default=None, help="default: the preset's")
    p.add_argument("--heads", type=int, default=None, help="default: the preset's")
    p.add_argument("--vocab", type=int, default=None, help="default: the preset's")
    p.add_argument("--seq", type=int, default=None, help="default: the preset's")
    p.add_argument("--batch-size", type=int, default=None, help="per rank; default: the preset's")
    p.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="auto: bf16 on CUDA, fp32 elsewhere (the fp32/tf32 rows stay fp32)",
    )
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="peak TFLOP/s per device for MFU; default on CUDA: looked up from "
        "the GPU's name (H100/H200 SXM 989, A100 312); on CPU: no MFU",
    )
    p.add_argument(
        "--kinds",
        nargs="+",
        choices=list(KINDS),
        default=None,
        help="rows to time (default: all that the device supports)",
    )
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--launch-timeout", type=float, default=600.0)
    p.add_argument("--json-out", metavar="FILE", help="also write the final JSON here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def main() -> None:
    p = build_parser()
    args = p.parse_args()
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.dim % args.heads:
        p.error(f"--dim {args.dim} is not divisible by --heads {args.heads}")
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        p.error("--peak-tflops must be > 0")
    if args.steps < 1 or args.warmup < 1:
        p.error("--steps and --warmup must be >= 1")
    if args.worker:
        worker(args)
        return
    sys.exit(driver(args, p))


if __name__ == "__main__":
    main()
