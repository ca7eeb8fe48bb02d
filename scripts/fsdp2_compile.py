#!/usr/bin/env python
"""torch.compile with FSDP2: activation checkpointing, then per-block compile, then fully_shard.

    torchrun --nproc-per-node 2 scripts/fsdp2_compile.py
    torchrun --nproc-per-node 8 scripts/fsdp2_compile.py --steps 50   # CUDA
    torchrun --nproc-per-node 2 scripts/fsdp2_compile.py --no-compile # the eager baseline
    python scripts/fsdp2_compile.py                                   # one process

The order is torchtitan's (``parallelize_llama``: AC, ``apply_compile``, FSDP):

1. ``checkpoint_wrapper`` around each transformer block, first, so the
   compiler sees the checkpointed region and can plan the recompute;
2. ``block.compile(fullgraph=True)``: each block is compiled in place; the
   blocks share one structure, so the first one compiles and the others
   reuse its code with their own parameters as inputs: compile time does
   not grow with the number of blocks;
3. ``fully_shard`` on each block, then the root.  FSDP2's hooks, which issue
   the all-gathers and reduce-scatters, are excluded from compilation
   (``torch._dynamo.disable``), so communication stays eager around the
   compiled blocks and overlaps with compute as usual.

``fullgraph=True`` turns a graph break into an error at the first step rather
than a silent slowdown; a break inside a block usually means Python the
compiler cannot trace (prints, data-dependent control flow, ``.item()``).
Recompiles show up in the summary: the compiled-graph count must stop growing
after step 0.  Set ``TORCH_LOGS=recompiles,graph_breaks`` to see why it does.

Compile time is paid in the first step (about a minute for this toy on a
small CPU with a cold cache); inductor caches compiled code on disk
(``TORCHINDUCTOR_CACHE_DIR``), so the next run starts in seconds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

# --------------------------------------------------------------------------
# Launch: device, process group, one-line errors
# --------------------------------------------------------------------------


class UsageError(Exception):
    """A bad flag or launch; reported as one line with exit code 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def init_distributed(device_arg: str, timeout_s: float) -> tuple[int, int, torch.device]:
    """Start the default process group from torchrun's environment (or as a single process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_arg == "auto":
        device_arg = "cuda" if torch.cuda.is_available() else "cpu"
    if device_arg == "cuda":
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is visible (use --device cpu)")
        if local_rank >= torch.cuda.device_count():
            raise UsageError(
                f"LOCAL_RANK {local_rank} has no GPU ({torch.cuda.device_count()} visible); "
                "launch at most one process per GPU"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    device_id = device if device.type == "cuda" else None
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group(backend, timeout=timeout, device_id=device_id)
    elif world == 1:
        # Plain `python script.py`: a private in-memory store, a real group of one.
        dist.init_process_group(
            backend,
            store=dist.HashStore(),
            rank=0,
            world_size=1,
            timeout=timeout,
            device_id=device_id,
        )
    else:
        raise UsageError(f"WORLD_SIZE={world} but no MASTER_ADDR: launch with torchrun")
    return dist.get_rank(), dist.get_world_size(), device


def run(main) -> None:
    try:
        main()
    except UsageError as e:
        prefix = (
            f"[rank {os.environ['RANK']}] " if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
        )
        print(f"{prefix}error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)


# --------------------------------------------------------------------------
# Model: a small decoder-only transformer with rotary position embeddings
# --------------------------------------------------------------------------


def rope_table(head_dim: int, max_seq: int, theta: float = 10000.0) -> torch.Tensor:
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


def apply_rope(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    cos, sin = table[: x.shape[-2], :half], table[: x.shape[-2], half:]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(nn.Module):
    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.attention_norm = nn.LayerNorm(dim)
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.ffn_norm = nn.LayerNorm(dim)
        self.w1 = nn.Linear(dim, 4 * dim)
        self.w2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (
            self.wqkv(self.attention_norm(x))
            .view(b, s, 3, self.n_heads, -1)
            .transpose(1, 3)
            .unbind(2)
        )
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.w2(F.gelu(self.w1(self.ffn_norm(x))))


class Transformer(nn.Module):
    def __init__(
        self,
        vocab: int = 64,
        dim: int = 32,
        n_heads: int = 4,
        n_layers: int = 2,
        max_seq: int = 16,
        tie_embeddings: bool = False,
    ):
        super().__init__()
        self.head_dim, self.max_seq, self.tie_embeddings = dim // n_heads, max_seq, tie_embeddings
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleDict({str(i): Block(dim, n_heads) for i in range(n_layers)})
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        # Not persistent: derived from the config, so it is in no checkpoint and
        # must be recomputed wherever the model is materialised from meta.
        self.register_buffer("rope", rope_table(self.head_dim, max_seq), persistent=False)
        # N(0, 1), nn.Embedding's default, makes huge logits once tied to the output.
        nn.init.normal_(self.tok_embeddings.weight, std=0.02)
        self.tie_weights()

    def tie_weights(self) -> None:
        if self.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    @torch.no_grad()
    def init_buffers(self) -> None:
        self.rope.copy_(rope_table(self.head_dim, self.max_seq))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for block in self.layers.values():
            h = block(h, self.rope)
        return self.output(self.norm(h))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def token_batch(seed: int, rank: int, step: int, batch_size: int, vocab: int = 64, seq: int = 16):
    """Arithmetic sequences mod vocab, a fresh generator per (rank, step): learnable, reproducible."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + rank) * 1_000_003 + step)
    start = torch.randint(0, vocab, (batch_size, 1), generator=g)
    stride = torch.randint(1, 8, (batch_size, 1), generator=g)
    tokens = (start + stride * torch.arange(seq + 1)) % vocab
    return tokens[:, :-1], tokens[:, 1:]


# --------------------------------------------------------------------------
# The three steps, in this order
# --------------------------------------------------------------------------


def apply_ac(model: Transformer) -> None:
    for name, block in model.layers.named_children():
        model.layers.register_module(name, checkpoint_wrapper(block))


def apply_compile(model: Transformer, backend: str) -> None:
    # In place (Module.compile), so the module tree and parameter names stay
    # unchanged: state dicts and checkpoints do not get an "_orig_mod." prefix.
    for block in model.layers.values():
        block.compile(backend=backend, fullgraph=True)


def apply_fsdp(model: Transformer, mesh, mp_policy: MixedPrecisionPolicy) -> None:
    for block in model.layers.values():
        fully_shard(block, mesh=mesh, mp_policy=mp_policy)
    fully_shard(model, mesh=mesh, mp_policy=mp_policy)


def compiled_graphs() -> int:
    """Graphs dynamo has compiled so far in this process (its internal counter, as its tests read it)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto: cuda when a GPU is visible, else cpu (gloo)",
    )
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=4, help="per rank")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0, help="weights use it; data adds the rank")
    p.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile backend: inductor, aot_eager (no code generation), eager",
    )
    p.add_argument(
        "--no-compile", dest="compile", action="store_false", help="run eagerly, for comparison"
    )
    p.add_argument("--no-ac", dest="ac", action="store_false", help="no activation checkpointing")
    p.add_argument(
        "--bf16", action="store_true", help="bf16 parameters in compute, fp32 gradient reduction"
    )
    p.add_argument(
        "--timeout-s",
        type=float,
        default=300.0,
        help="collective timeout; compiling the first step can take minutes",
    )
    args = p.parse_args(argv)
    if args.timeout_s <= 0:
        p.error("--timeout-s must be > 0")
    if args.steps < 1 or args.batch_size < 1:
        p.error("--steps and --batch-size must be >= 1")
    if args.compile:
        import torch._dynamo

        if args.compile_backend not in torch._dynamo.list_backends(exclude_tags=()):
            common = sorted({"eager", "aot_eager", *torch._dynamo.list_backends()})
            p.error(
                f"--compile-backend {args.compile_backend!r}: unknown (try {', '.join(common)})"
            )
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, world, device = init_distributed(args.device, args.timeout_s)
    try:
        mesh = init_device_mesh(device.type, (world,))
        # Same seed on every rank: identical full weights, of which fully_shard keeps a slice.
        torch.manual_seed(args.seed)
        model = Transformer().to(device)
        if args.ac:
            apply_ac(model)
        if args.compile:
            apply_compile(model, args.compile_backend)
        mp = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if args.bf16
            else MixedPrecisionPolicy()
        )
        apply_fsdp(model, mesh, mp)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

        losses, graphs, step_s = [], [], []
        for step in range(args.steps):
            t0 = time.perf_counter()
            x, y = (t.to(device) for t in token_batch(args.seed, rank, step, args.batch_size))
            loss = lm_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            global_loss = loss.detach().clone()
            dist.all_reduce(global_loss)
            losses.append(global_loss.item() / world)
            step_s.append(round(time.perf_counter() - t0, 4))
            graphs.append(compiled_graphs())
            if rank == 0:
                print(
                    f"step {step:4d}  loss {losses[-1]:.6f}  time {step_s[-1]:.3f}s  graphs {graphs[-1]}",
                    flush=True,
                )

        if rank == 0:
            print(
                json.dumps(
                    {
                        "script": os.path.basename(__file__),
                        "world_size": world,
                        "device": device.type,
                        "compile": args.compile,
                        "compile_backend": args.compile_backend if args.compile else None,
                        "ac": args.ac,
                        "bf16": args.bf16,
                        "steps": args.steps,
                        "losses": losses,
                        "compiled_graphs": graphs,
                        "step_seconds": step_s,
                    },
                    sort_keys=True,
                ),
                flush=True,
            )
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    run(main)
