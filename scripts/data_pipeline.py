#!/usr/bin/env python
"""A resumable data pipeline: DistributedSampler, DataLoader, LR schedule, DCP checkpoints.

    torchrun --nproc-per-node 2 scripts/data_pipeline.py --epochs 2
    # stop mid-epoch (as a preemption would), then run the same command again: it resumes
    torchrun --nproc-per-node 2 scripts/data_pipeline.py --checkpoint-dir ckpt --stop-after 7
    torchrun --nproc-per-node 2 scripts/data_pipeline.py --checkpoint-dir ckpt
    torchrun --nproc-per-node 2 scripts/data_pipeline.py --data tokens.pt   # a 1-D tensor of token ids

The pieces and why each is there:

- ``DistributedSampler`` gives each rank a disjoint slice of one shuffled
  order.  The order is seeded by ``seed + epoch``; call ``set_epoch`` before
  every epoch, or every epoch repeats the first one's order.  All ranks must
  take the same number of steps (FSDP all-gathers in forward), so the sampler
  evens the shards: it pads by repeating samples (default) or, with
  ``--drop-last``, drops the tail; ``--drop-last`` also drops a short last
  batch in the DataLoader;
- resuming mid-epoch: a DataLoader with workers prefetches, so what the
  sampler has handed out is not what was trained on.  The loop counts the
  batches it has trained on, and on resume the sampler skips that many of
  the epoch's samples (``ResumableDistributedSampler``);
- the checkpoint is one DCP save: model and optimizer through
  ``get_state_dict`` (sharded, so each rank writes its own part), plus the
  data position and the LR scheduler; ``dcp.load`` fills the same structure
  in place and ``set_state_dict`` puts it back.  An ``AppState`` object with
  ``state_dict``/``load_state_dict`` (DCP's ``Stateful``) keeps save and load
  symmetrical, as in the DCP tutorial;
- ``--checkpoint-dir`` resumes from the newest complete checkpoint there, so
  a restarted job (torchrun ``--max-restarts``, a requeued Slurm job) simply
  reruns the same command.

Resuming needs the same world size, batch size and seed: the sampler's order
depends on all three (the script refuses otherwise).  The checkpoint folder
must be on a filesystem every rank sees.  The model has no
dropout; with dropout, also save each rank's RNG state.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import re
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, Dataset, DistributedSampler

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


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------


def synthetic_corpus(n_samples: int, seq: int, vocab: int, seed: int) -> torch.Tensor:
    """Stands in for a tokenised file: arithmetic runs mod vocab, one per sample window."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n_samples, 1), generator=g)
    stride = torch.randint(1, 8, (n_samples, 1), generator=g)
    runs = (start + stride * torch.arange(seq)) % vocab
    return torch.cat([runs.flatten(), runs[:1, 0]])  # one token more, for the last target


class TokenWindows(Dataset):
    """Sample i: tokens [i*seq, (i+1)*seq) and the same shifted by one as targets."""

    def __init__(self, tokens: torch.Tensor, seq: int):
        self.tokens, self.seq = tokens, seq

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq

    def __getitem__(self, i: int):
        chunk = self.tokens[i * self.seq : (i + 1) * self.seq + 1].long()
        return i, chunk[:-1], chunk[1:]


class ResumableDistributedSampler(DistributedSampler):
    """A DistributedSampler that can start partway through an epoch."""

    skip = 0  # samples of this rank's epoch order already trained on

    def __iter__(self):
        return iter(list(super().__iter__())[self.skip :])

    def __len__(self) -> int:
        return self.num_samples - self.skip


def make_loader(
    dataset: Dataset, rank: int, world: int, args, pin_memory: bool = False
) -> tuple[DataLoader, ResumableDistributedSampler]:
    sampler = ResumableDistributedSampler(
        dataset,
        num_replicas=world,
        rank=rank,
        shuffle=True,
        seed=args.seed,
        drop_last=args.drop_last,
    )
    # Pinned host memory lets the copy to the GPU (non_blocking) overlap with compute.
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        drop_last=args.drop_last,
        num_workers=args.num_workers,
        pin_memory=pin_memory,
        persistent_workers=args.num_workers > 0,
    )
    return loader, sampler


class Progress:
    """Where the data stream stands: the part of the state a model checkpoint lacks."""

    def __init__(self):
        self.epoch, self.batch_in_epoch, self.step = 0, 0, 0


def start_epoch(sampler: ResumableDistributedSampler, progress: Progress, batch_size: int) -> None:
    # The same epoch number on every rank: the same permutation, cut into disjoint slices.
    sampler.set_epoch(progress.epoch)
    sampler.skip = progress.batch_in_epoch * batch_size


def lr_lambda(total_steps: int, warmup: int):
    """Linear warm-up, then cosine decay to 10%."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, total_steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))

    return f


# --------------------------------------------------------------------------
# Checkpoint
# --------------------------------------------------------------------------


class AppState(Stateful):
    """Everything a resumed run needs, in one object DCP saves and loads."""

    def __init__(self, model, optimizer, scheduler, progress: Progress, run_config: dict):
        self.model, self.optimizer, self.scheduler, self.progress = (
            model,
            optimizer,
            scheduler,
            progress,
        )
        self.run_config = run_config

    def state_dict(self) -> dict:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        p = self.progress
        return {
            "model": model_sd,
            "optim": optim_sd,
            "scheduler": self.scheduler.state_dict(),
            "data": {"epoch": p.epoch, "batch_in_epoch": p.batch_in_epoch, "step": p.step},
            "run_config": dict(self.run_config),
        }

    def load_state_dict(self, sd: dict) -> None:
        diff = {
            k: (v, self.run_config.get(k))
            for k, v in sd["run_config"].items()
            if self.run_config.get(k) != v
        }
        if diff:
            raise UsageError(
                "cannot resume: the sampler's order would differ; the checkpoint has "
                + ", ".join(f"{k}={old} (this run: {new})" for k, (old, new) in diff.items())
            )
        set_state_dict(
            self.model, self.optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optim"]
        )
        self.scheduler.load_state_dict(sd["scheduler"])
        self.progress.epoch, self.progress.batch_in_epoch, self.progress.step = (
            int(sd["data"]["epoch"]),
            int(sd["data"]["batch_in_epoch"]),
            int(sd["data"]["step"]),
        )


def latest_checkpoint(root: str) -> str | None:
    """Newest step_N folder with DCP's .metadata (written last, so only complete saves count)."""
    if not os.path.isdir(root):
        return None
    done = [
        d
        for d in os.listdir(root)
        if re.fullmatch(r"step_\d+", d) and os.path.isfile(os.path.join(root, d, ".metadata"))
    ]
    return os.path.join(root, max(done, key=lambda d: int(d[5:]))) if done else None


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
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto: cuda when a GPU is visible, else cpu (gloo)",
    )
    p.add_argument(
        "--data", metavar="FILE", help="a torch.save'd 1-D tensor of token ids (default: synthetic)"
    )
    p.add_argument("--samples", type=int, default=40, help="synthetic corpus size, in samples")
    p.add_argument("--seq", type=int, default=16, help="tokens per sample")
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4, help="per rank")
    p.add_argument(
        "--drop-last",
        action="store_true",
        help="drop the samples that do not divide evenly, instead of padding with repeats",
    )
    p.add_argument(
        "--num-workers", type=int, default=1, help="DataLoader worker processes per rank"
    )
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0, help="weights and shuffle order")
    p.add_argument(
        "--checkpoint-dir", metavar="DIR", help="save here; resume from the newest checkpoint in it"
    )
    p.add_argument(
        "--save-every", type=int, default=0, help="also save every N steps (0: only at the end)"
    )
    p.add_argument(
        "--stop-after",
        type=int,
        default=0,
        help="save and stop after this many steps in total, as a preempted job would",
    )
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
        min(args.samples, args.seq, args.vocab, args.epochs, args.batch_size) < 1
        or min(args.num_workers, args.save_every, args.stop_after, args.warmup_steps) < 0
    ):
        p.error(
            "sizes must be >= 1; --num-workers, --save-every, --stop-after, --warmup-steps >= 0"
        )
    if args.stop_after and not args.checkpoint_dir:
        p.error("--stop-after needs --checkpoint-dir, or the stopped run could not be resumed")
    if args.data and not os.path.isfile(args.data):
        p.error(f"--data {args.data}: no such file")
    return args


def load_tokens(args) -> torch.Tensor:
    if not args.data:
        return synthetic_corpus(args.samples, args.seq, args.vocab, args.seed)
    tokens = torch.load(args.data, mmap=True, weights_only=True)
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.is_floating_point():
        raise UsageError(f"--data {args.data}: expected a 1-D integer tensor of token ids")
    if int(tokens.max()) >= args.vocab:
        raise UsageError(
            f"--data {args.data}: token id {int(tokens.max())} >= --vocab {args.vocab}"
        )
    return tokens


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, world, device = init_distributed(args.device, args.timeout_s)
    try:
        dataset = TokenWindows(load_tokens(args), args.seq)
        loader, sampler = make_loader(dataset, rank, world, args, pin_memory=device.type == "cuda")
        steps_per_epoch = len(loader)
        if steps_per_epoch == 0:
            raise UsageError(
                f"{len(dataset)} samples give no full batch of {args.batch_size} on {world} ranks"
            )
        total_steps = args.epochs * steps_per_epoch

        mesh = init_device_mesh(device.type, (world,))
        torch.manual_seed(args.seed)
        model = Transformer(vocab=args.vocab, max_seq=args.seq).to(device)
        for block in model.layers.values():
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            opt, lr_lambda(total_steps, args.warmup_steps)
        )
        progress = Progress()
        run_config = {
            "world_size": world,
            "batch_size": args.batch_size,
            "seed": args.seed,
            "samples": len(dataset),
            "drop_last": args.drop_last,
        }
        app = AppState(model, opt, scheduler, progress, run_config)

        # Rank 0 picks, so that a lagging view of a shared filesystem cannot split the ranks.
        choice = [
            latest_checkpoint(args.checkpoint_dir) if args.checkpoint_dir and rank == 0 else None
        ]
        dist.broadcast_object_list(choice, src=0)
        resumed_from = choice[0]
        if resumed_from:
            state = {"app": app}
            dcp.load(state, checkpoint_id=resumed_from)  # calls app.load_state_dict
            if rank == 0:
                print(
                    f"resumed from {resumed_from} at epoch {progress.epoch}, batch {progress.batch_in_epoch}",
                    flush=True,
                )

        def save() -> None:
            path = os.path.join(args.checkpoint_dir, f"step_{progress.step:06d}")
            dcp.save({"app": app}, checkpoint_id=path)

        losses, lrs, seen = [], [], {}
        stopped = False
        while progress.epoch < args.epochs and not stopped:
            start_epoch(sampler, progress, args.batch_size)
            for idx, x, y in loader:
                seen.setdefault(progress.epoch, []).extend(idx.tolist())
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                loss = lm_loss(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                lrs.append(scheduler.get_last_lr()[0])
                scheduler.step()
                # Count the batch only once its update is in the weights: this is the resume point.
                progress.batch_in_epoch += 1
                progress.step += 1
                global_loss = loss.detach().clone()
                dist.all_reduce(global_loss)
                losses.append(global_loss.item() / world)
                if rank == 0:
                    print(
                        f"step {progress.step - 1:4d}  epoch {progress.epoch}  loss {losses[-1]:.6f}  "
                        f"lr {lrs[-1]:.6f}",
                        flush=True,
                    )
                if args.checkpoint_dir and args.save_every and progress.step % args.save_every == 0:
                    save()
                if args.stop_after and progress.step >= args.stop_after:
                    stopped = True
                    break
            else:
                progress.epoch, progress.batch_in_epoch = progress.epoch + 1, 0
        if (
            args.checkpoint_dir
            and losses
            and not (args.save_every and progress.step % args.save_every == 0)
        ):
            save()

        all_seen = [None] * world
        dist.all_gather_object(all_seen, seen)
        sha = full_weights_sha256(model)
        if rank == 0:
            print(
                json.dumps(
                    {
                        "script": os.path.basename(__file__),
                        "world_size": world,
                        "device": device.type,
                        "samples": len(dataset),
                        "steps_per_epoch": steps_per_epoch,
                        "resumed_from": resumed_from,
                        "stopped": stopped,
                        "next_step": progress.step,
                        "losses": losses,
                        "lrs": lrs,
                        "weights_sha256": sha,
                        # epoch -> one list of sample ids per rank, in the order trained on
                        "seen": {
                            str(e): [s.get(e, []) for s in all_seen]
                            for e in sorted({e for s in all_seen for e in s})
                        },
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
