#!/usr/bin/env python
"""Load a full pretrained checkpoint into an FSDP2 model built on the meta device.

    python scripts/fsdp2_load_pretrained.py --save-demo pretrained.pt     # a stand-in "pretrained" file
    torchrun --nproc-per-node 2 scripts/fsdp2_load_pretrained.py --checkpoint pretrained.pt
    torchrun --nproc-per-node 8 scripts/fsdp2_load_pretrained.py --checkpoint model.safetensors  # CUDA

No rank ever holds the whole model in device memory, and only rank 0 reads the file:

1. build the model under ``torch.device("meta")``: shapes only, no memory;
2. ``fully_shard`` each block, then the root.  The root owns the embedding and
   the output projection; with ``--tie-embeddings`` they are one parameter,
   and a shared parameter must live in a single FSDP unit;
3. ``to_empty(device=...)`` allocates this rank's shards, uninitialised.  Then
   re-tie the embeddings (a plain ``to_empty`` replaces each module's
   parameter with a new one, which unties them; FSDP2 happens to keep the tie,
   but the call costs nothing and keeps the code right for both) and
   recompute the non-persistent buffers (the RoPE table): they are in no
   checkpoint, and ``to_empty`` left garbage in them;
4. rank 0 opens the file: ``torch.load(mmap=True, weights_only=True)`` maps
   it instead of reading it into memory, and refuses pickled code; a
   ``.safetensors`` file is read with the ``safetensors`` package (into host
   memory, whole).  Every other rank passes an empty dict;
5. ``set_model_state_dict(..., StateDictOptions(full_state_dict=True,
   broadcast_from_rank0=True))`` broadcasts one tensor at a time from rank 0
   and each rank copies out its own shard, so the extra memory per rank is
   one full tensor, not one full model.

Safetensors files of tied models (Hugging Face convention) store the shared
weight once; the missing ``output.weight`` is filled from the embedding
before the broadcast.  Key names must match the model's: map them first
(torchtitan keeps such maps in its ``state_dict_adapter``).

After loading, a few training steps run so the loaded model is shown to
train; the summary carries a SHA-256 of the gathered weights right after
loading, which the tests compare with the file's.
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
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
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


# --------------------------------------------------------------------------
# Reading the checkpoint (rank 0 only)
# --------------------------------------------------------------------------


def read_full_state_dict(path: str) -> dict[str, torch.Tensor]:
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(path, device="cpu")
    # mmap: tensors stay in the file's pages until the broadcast touches them.
    # weights_only: a checkpoint from elsewhere cannot run code while unpickling.
    sd = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    if not isinstance(sd, dict):
        raise UsageError(f"{path}: expected a state dict, found {type(sd).__name__}")
    return sd.get("model", sd) if isinstance(sd.get("model"), dict) else sd


def check_against_model(sd: dict[str, torch.Tensor], model: Transformer) -> str | None:
    """Fill a dropped tied weight; return a one-line problem, or None."""
    expected = {
        k: tuple(v.shape) for k, v in model.state_dict().items()
    }  # global shapes, even for DTensors
    if model.tie_embeddings:
        emb, out = sd.get("tok_embeddings.weight"), sd.get("output.weight")
        if out is None and emb is not None:
            sd["output.weight"] = emb
        elif out is not None and emb is not None and not torch.equal(out, emb):
            return "the checkpoint has different tok_embeddings and output weights but the model ties them"
    missing = sorted(expected.keys() - sd.keys())
    unexpected = sorted(sd.keys() - expected.keys())
    if missing or unexpected:
        return f"key mismatch: missing {missing[:4]}, unexpected {unexpected[:4]}"
    for k, shape in expected.items():
        if tuple(sd[k].shape) != shape:
            return f"{k}: checkpoint shape {tuple(sd[k].shape)}, model shape {shape} (wrong --dim/--layers/--vocab?)"
    return None


def full_weights_sha256(model: nn.Module) -> str | None:
    """Collective. SHA-256 over the gathered weights in key order, on rank 0; None elsewhere."""
    sd = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if dist.get_rank() != 0:
        return None
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(sd[k].detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a torch.save'd state dict (.pt/.pth/.bin) or .safetensors",
    )
    p.add_argument(
        "--save-demo",
        metavar="FILE",
        help="write a randomly initialised model's state dict to FILE (a stand-in for pretrained "
        "weights) and exit; .safetensors needs the safetensors package",
    )
    p.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto: cuda when a GPU is visible, else cpu (gloo)",
    )
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument(
        "--no-tie-embeddings",
        dest="tie_embeddings",
        action="store_false",
        help="separate embedding and output weights (tied by default, as in many HF models)",
    )
    p.add_argument(
        "--steps", type=int, default=2, help="training steps after loading (0: load only)"
    )
    p.add_argument("--batch-size", type=int, default=4, help="per rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0, help="data seed (and the demo weights' seed)")
    p.add_argument(
        "--timeout-s",
        type=float,
        default=120.0,
        help="collective timeout, so a broken peer ends the run instead of hanging it",
    )
    args = p.parse_args(argv)
    if args.timeout_s <= 0:
        p.error("--timeout-s must be > 0")
    if not args.checkpoint and not args.save_demo:
        p.error("--checkpoint FILE is required (make a demo one with --save-demo FILE)")
    if (
        args.steps < 0
        or args.batch_size < 1
        or args.layers < 1
        or args.dim < 8
        or args.dim % 8
        or args.vocab < 2
    ):
        p.error(
            "need --steps >= 0, --batch-size >= 1, --layers >= 1, --dim a multiple of 8, --vocab >= 2"
        )
    for path in (args.checkpoint, args.save_demo):
        if path and path.endswith(".safetensors"):
            try:
                import safetensors  # noqa: F401
            except ImportError:
                p.error(f"{path}: reading or writing .safetensors needs the safetensors package")
    if (
        args.checkpoint
        and not args.save_demo
        and os.environ.get("RANK", "0") == "0"
        and not os.path.isfile(args.checkpoint)
    ):
        # Only rank 0 reads, so only rank 0's host needs the file.
        p.error(f"--checkpoint {args.checkpoint}: no such file")
    return args


def build_model(args, **kw) -> Transformer:
    return Transformer(
        vocab=args.vocab,
        dim=args.dim,
        n_layers=args.layers,
        tie_embeddings=args.tie_embeddings,
        **kw,
    )


def save_demo(args) -> None:
    torch.manual_seed(args.seed)
    sd = build_model(args).state_dict()
    if args.save_demo.endswith(".safetensors"):
        from safetensors.torch import save_file

        if args.tie_embeddings:
            del sd[
                "output.weight"
            ]  # safetensors refuses shared tensors; HF drops the tied copy too
        save_file({k: v.contiguous() for k, v in sd.items()}, args.save_demo)
    else:
        torch.save(sd, args.save_demo)
    print(
        json.dumps(
            {"script": os.path.basename(__file__), "saved": args.save_demo, "keys": sorted(sd)}
        )
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.save_demo:
        return save_demo(args)
    rank, world, device = init_distributed(args.device, args.timeout_s)
    try:
        mesh = init_device_mesh(device.type, (world,))
        with torch.device("meta"):
            model = build_model(args)
        for block in model.layers.values():
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        model.to_empty(device=device)
        model.tie_weights()
        model.init_buffers()

        full_sd, problem = {}, None
        if rank == 0:
            full_sd = read_full_state_dict(args.checkpoint)
            problem = check_against_model(full_sd, model)
        # Every rank learns of a bad file and exits with the same line, instead
        # of ranks 1..N waiting in a broadcast that never comes.
        verdict = [problem]
        dist.broadcast_object_list(verdict, src=0)
        if verdict[0]:
            raise UsageError(f"--checkpoint {args.checkpoint}: {verdict[0]}")
        set_model_state_dict(
            model,
            full_sd,
            options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
        )
        del full_sd
        loaded_sha = full_weights_sha256(model)
        tied = model.output.weight is model.tok_embeddings.weight
        sharded = all(isinstance(p, DTensor) for p in model.parameters())
        local = torch.tensor([sum(p.to_local().numel() for p in model.parameters())], device=device)
        per_rank = [torch.zeros_like(local) for _ in range(world)]
        dist.all_gather(per_rank, local)

        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        losses = []
        for step in range(args.steps):
            x, y = (
                t.to(device)
                for t in token_batch(args.seed, rank, step, args.batch_size, vocab=args.vocab)
            )
            loss = lm_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            global_loss = loss.detach().clone()
            dist.all_reduce(global_loss)
            losses.append(global_loss.item() / world)
            if rank == 0:
                print(f"step {step:4d}  loss {losses[-1]:.6f}", flush=True)

        if rank == 0:
            fmt = "safetensors" if args.checkpoint.endswith(".safetensors") else "torch"
            print(
                json.dumps(
                    {
                        "script": os.path.basename(__file__),
                        "world_size": world,
                        "device": device.type,
                        "format": fmt,
                        "weights_sha256": loaded_sha,
                        "tied": tied,
                        "sharded": sharded,
                        "params_per_rank": [int(t.item()) for t in per_rank],
                        "steps": args.steps,
                        "losses": losses,
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
