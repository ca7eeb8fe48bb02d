#!/usr/bin/env python
"""Evaluate an FSDP2 model across ranks, then export one consolidated checkpoint.

    torchrun --nproc-per-node 2 scripts/fsdp2_eval_export.py --export out/
    torchrun --nproc-per-node 8 scripts/fsdp2_eval_export.py --export out/ --format safetensors   # CUDA
    python -c "import json, torch; from fsdp2_eval_export import Transformer; \\
        m = Transformer(**json.load(open('out/config.json'))); \\
        m.load_state_dict(torch.load('out/model.pt', weights_only=True))"   # anywhere, no torch.distributed

Evaluation under FSDP2 (``evaluate``):

- ``model.eval()`` and ``torch.no_grad()``: no graph, no gradients;
- every rank must run the same number of forward passes, because each
  forward all-gathers parameters with all ranks.  The validation set is
  split without padding (a padded copy of a sample would be counted twice),
  so shards differ by up to one sample and their batch counts can differ; a
  rank that runs out does forward passes on a stand-in batch weighted zero;
- the metric is sum(loss) / count(tokens), each all-reduced as a sum.  The
  mean of per-rank means weighs a short shard as much as a full one and is
  wrong for uneven shards (the summary prints both);
- ``model.reshard()`` afterwards.  FSDP2 never reshards the root after
  forward (backward would gather it again at once), and a no-grad forward
  has no backward to free it: without ``reshard()`` the root keeps its full,
  unsharded parameters in memory through the next training step.

Export (``export``): ``get_model_state_dict`` with ``full_state_dict=True,
cpu_offload=True`` gathers every parameter once, to CPU on rank 0 only, one
tensor at a time; rank 0 writes ``model.pt`` (or ``model.safetensors``,
which needs the ``safetensors`` package) and ``config.json``.  The result is a
plain state dict: ``torch.load`` + ``load_state_dict`` with no process group.
For a Hugging Face layout, write with DCP's ``HuggingFaceStorageWriter``
(``enable_consolidation=True``) after mapping the key names.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

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


def validation_set(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Held-out samples: a data seed no training batch uses."""
    return token_batch(seed + 1_000, 0, 0, n)


# --------------------------------------------------------------------------
# Evaluation and export
# --------------------------------------------------------------------------


def root_is_sharded(model: nn.Module) -> bool:
    """The root unit's parameters (embedding, final norm, output) are DTensor shards, not gathered tensors."""
    return all(
        isinstance(p, DTensor)
        for m in (model.tok_embeddings, model.norm, model.output)
        for p in m.parameters()
    )


@torch.no_grad()
def evaluate(
    model: nn.Module,
    val_x: torch.Tensor,
    val_y: torch.Tensor,
    batch_size: int,
    device: torch.device,
) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    # Contiguous shards, sizes differing by at most one: no sample repeated, none dropped.
    x_shard, y_shard = val_x.tensor_split(world)[rank], val_y.tensor_split(world)[rank]
    local_batches = -(-len(x_shard) // batch_size)
    n_batches = torch.tensor([local_batches], device=device)
    dist.all_reduce(n_batches, op=dist.ReduceOp.MAX)
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    tokens = torch.zeros((), dtype=torch.float64, device=device)
    for i in range(int(n_batches.item())):
        if i < local_batches:
            part = slice(i * batch_size, (i + 1) * batch_size)
            x, y, weight = x_shard[part], y_shard[part], 1.0
        else:
            x, y, weight = val_x[:1], val_y[:1], 0.0  # keeps this rank in step with the all-gathers
        x, y = x.to(device), y.to(device)
        logits = model(x)
        per_token = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none")
        loss_sum += weight * per_token.double().sum()
        tokens += weight * per_token.numel()
    local_mean = (loss_sum / tokens.clamp(min=1)).reshape(1)
    totals = torch.stack([loss_sum, tokens])
    dist.all_reduce(totals)
    dist.all_reduce(local_mean)
    root_sharded_before = root_is_sharded(model)
    model.reshard()
    if was_training:
        model.train()
    return {
        "loss": (totals[0] / totals[1]).item(),
        "tokens": int(totals[1].item()),
        "mean_of_rank_means": local_mean.item() / world,
        "padding_batches": int(n_batches.item()) - local_batches,
        "root_sharded_before_reshard": root_sharded_before,
        "root_sharded_after_reshard": root_is_sharded(model),
    }


def export(model: nn.Module, out_dir: str, fmt: str, config: dict) -> str | None:
    """Collective. Gather the full weights to rank 0's CPU and write them; returns their SHA-256 on rank 0."""
    sd = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if dist.get_rank() != 0:
        return None
    os.makedirs(out_dir, exist_ok=True)
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(sd[k].detach().float().contiguous().numpy().tobytes())
    if fmt == "safetensors":
        from safetensors.torch import save_file

        if config["tie_embeddings"]:
            # safetensors refuses shared tensors; a tied model built from config.json
            # gets output.weight with the embedding (load_state_dict(..., strict=False)).
            sd.pop("output.weight")
        save_file(
            {k: v.contiguous() for k, v in sd.items()}, os.path.join(out_dir, "model.safetensors")
        )
    else:
        torch.save(sd, os.path.join(out_dir, "model.pt"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return h.hexdigest()


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


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
    p.add_argument(
        "--eval-every", type=int, default=2, help="evaluate every N steps, and after the last"
    )
    p.add_argument("--batch-size", type=int, default=4, help="per rank, training")
    p.add_argument("--eval-batch-size", type=int, default=4, help="per rank")
    p.add_argument(
        "--val-samples",
        type=int,
        default=9,
        help="validation set size; 9 on 2 ranks gives shards of 5 and 4, one batch more on rank 0",
    )
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0, help="weights; training data adds the rank")
    p.add_argument(
        "--export", metavar="DIR", help="write DIR/model.pt (or .safetensors) and DIR/config.json"
    )
    p.add_argument("--format", choices=["torch", "safetensors"], default="torch")
    p.add_argument(
        "--timeout-s",
        type=float,
        default=120.0,
        help="collective timeout, so a broken peer ends the run instead of hanging it",
    )
    args = p.parse_args(argv)
    if args.timeout_s <= 0:
        p.error("--timeout-s must be > 0")
    if (
        min(args.steps, args.eval_every, args.batch_size, args.eval_batch_size, args.val_samples)
        < 1
    ):
        p.error(
            "--steps, --eval-every, --batch-size, --eval-batch-size and --val-samples must be >= 1"
        )
    if args.format == "safetensors":
        try:
            import safetensors  # noqa: F401
        except ImportError:
            p.error("--format safetensors needs the safetensors package")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, world, device = init_distributed(args.device, args.timeout_s)
    try:
        if args.val_samples < world:
            raise UsageError(
                f"--val-samples {args.val_samples} < world size {world}: some rank would get none"
            )
        mesh = init_device_mesh(device.type, (world,))
        config = {
            "vocab": 64,
            "dim": 32,
            "n_heads": 4,
            "n_layers": 2,
            "max_seq": 16,
            "tie_embeddings": True,
        }
        torch.manual_seed(args.seed)
        model = Transformer(**config).to(device)
        for block in model.layers.values():
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        val_x, val_y = validation_set(args.val_samples, args.seed)

        losses, evals = [], []
        for step in range(args.steps):
            x, y = (t.to(device) for t in token_batch(args.seed, rank, step, args.batch_size))
            loss = lm_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            global_loss = loss.detach().clone()
            dist.all_reduce(global_loss)
            losses.append(global_loss.item() / world)
            if rank == 0:
                print(f"step {step:4d}  loss {losses[-1]:.6f}", flush=True)
            if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
                evals.append(
                    {
                        "after_step": step,
                        **evaluate(model, val_x, val_y, args.eval_batch_size, device),
                    }
                )
                if rank == 0:
                    e = evals[-1]
                    print(
                        f"eval after step {step}: loss {e['loss']:.6f} over {e['tokens']} tokens "
                        f"(mean of rank means {e['mean_of_rank_means']:.6f})",
                        flush=True,
                    )
        padding = [None] * world
        dist.all_gather_object(padding, [e["padding_batches"] for e in evals])
        sha = export(model, args.export, args.format, config) if args.export else None
        if rank == 0:
            for e in evals:
                e.pop("padding_batches")
            print(
                json.dumps(
                    {
                        "script": os.path.basename(__file__),
                        "world_size": world,
                        "device": device.type,
                        "steps": args.steps,
                        "losses": losses,
                        "evals": evals,
                        "padding_batches_per_rank": padding,
                        "export": args.export,
                        "export_sha256": sha,
                        "format": args.format,
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
