#!/usr/bin/env python
"""Uneven inputs: DDP + ZeroRedundancyOptimizer under the Join context manager.

    torchrun --nproc-per-node 2 scripts/join_uneven.py
    torchrun --nproc-per-node 2 scripts/join_uneven.py --throw-on-early-termination

Rank r gets ``--batches + r * --extra-per-rank`` batches, so ranks run out at
different steps.  Without Join, the rank that still has data would wait
forever in an all-reduce its finished peers never join: a hang.

``Join([ddp, optimizer])`` makes finished ranks *shadow* the collectives the
others still issue: DDP's gradient all-reduce (with zero gradients) and
ZeroRedundancyOptimizer's parameter broadcast.  DDP keeps dividing by the
initial world size, so a step where k of W ranks still have data applies
(sum of the k ranks' gradients) / W.

Caveat (torch 2.13, by design): a finished rank discards the result of its
shadow all-reduce, and ZeRO's join hook then steps that rank's shard with no
gradient, so **parameters whose ZeRO shard lives on a finished rank stop
changing**; only the shards of ranks that still have data keep training.
PyTorch's own ZeRO+Join test adds a custom Joinable that sets the joined
rank's gradients to get full updates.  The summary reports which rank owns
which parameter, and the tests rebuild exactly this behaviour in one process
and compare the final weights.

``--throw-on-early-termination`` instead makes every rank raise as soon as any
rank runs out; the loop catches it, so all ranks stop after min(batches) steps
with identical weights.  Use it when you would rather drop the tail of the
data than train on partially averaged gradients, or when the loop has
collectives of its own that Join cannot shadow.

Collectives inside the loop other than those of the Joinables (a loss
all-reduce, say) are not shadowed, so this loop only logs rank 0's local loss
and gathers everything else after the Join context exits.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _dist_common as common  # this folder's shared plumbing: copy it along with this file
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

FEATURES = 4


def build_model(seed: int) -> nn.Module:
    common.seed_weights(seed)
    return nn.Linear(FEATURES, 1)


def num_batches(rank: int, batches: int, extra_per_rank: int) -> int:
    return batches + rank * extra_per_rank


def batch(seed: int, rank: int, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = common.data_generator(seed, rank, step)
    x = torch.randn(batch_size, FEATURES, generator=g)
    w_true = torch.arange(1.0, FEATURES + 1).unsqueeze(1)
    return x, x @ w_true + 0.5


def main(argv=None) -> None:
    p = common.base_parser(__doc__.splitlines()[0], steps=None, lr=0.1)
    p.add_argument("--batches", type=common.positive_int, default=4, help="batches on rank 0")
    p.add_argument(
        "--extra-per-rank", type=int, default=2, help="rank r gets r times this many more"
    )
    p.add_argument("--batch-size", type=common.positive_int, default=8)
    p.add_argument("--throw-on-early-termination", action="store_true")
    args = p.parse_args(argv)
    if args.batches < 1 or args.extra_per_rank < 0:
        raise common.LaunchError("--batches must be >= 1 and --extra-per-rank >= 0")
    common.require_numpy("all_gather_object")

    with common.distributed(args) as d:
        model = build_model(args.seed).to(d.device)
        ddp = DDP(model, device_ids=[d.device.index] if d.device.type != "cpu" else None)
        # ZeRO stage 1: each rank keeps optimizer state for its share of the
        # parameters and broadcasts its updated share after step().
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, lr=args.lr)

        n_local = num_batches(d.rank, args.batches, args.extra_per_rank)
        local_losses: list[float] = []
        stopped_early = False
        try:
            with Join([ddp, opt], throw_on_early_termination=args.throw_on_early_termination):
                for step in range(n_local):
                    x, y = (t.to(d.device) for t in batch(args.seed, d.rank, step, args.batch_size))
                    loss = F.mse_loss(ddp(x), y)
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    local_losses.append(loss.item())
                    if d.is_main:
                        common.log_step(d, step, local_losses[-1], rank0_local=True)
        except RuntimeError as e:
            # With throw_on_early_termination every rank raises this together.
            if not args.throw_on_early_termination or "exhausted" not in str(e):
                raise
            stopped_early = True

        # Outside Join every rank is back in step: ordinary collectives are safe.
        per_rank = [None] * d.world_size
        dist.all_gather_object(per_rank, local_losses)
        stopped = torch.tensor([int(stopped_early)], device=d.device)
        dist.all_reduce(stopped)
        # opt.optim is this rank's local optimizer: it holds only the owned shard.
        mine = {id(q) for g in opt.optim.param_groups for q in g["params"]}
        owners = [None] * d.world_size
        dist.all_gather_object(owners, [n for n, q in model.named_parameters() if id(q) in mine])
        weights = torch.cat([q.detach().reshape(-1).cpu() for q in model.parameters()]).tolist()
        common.summary(
            d,
            __file__,
            per_rank[0],
            len(per_rank[0]),
            losses_per_rank=per_rank,
            batches_per_rank=[
                num_batches(r, args.batches, args.extra_per_rank) for r in range(d.world_size)
            ],
            steps_per_rank=[len(x) for x in per_rank],
            total_steps=sum(len(x) for x in per_rank),
            ranks_stopped_early=int(stopped.item()),
            final_weights=weights,
            zero_owner={name: r for r, names in enumerate(owners) for name in names},
        )
        del ddp, opt


if __name__ == "__main__":
    common.run(main)
