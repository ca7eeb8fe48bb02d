#!/usr/bin/env python
"""DistributedDataParallel with a DistributedSampler and gradient accumulation.

    torchrun --nproc-per-node 2 scripts/ddp_train.py --accum-steps 2
    torchrun --nproc-per-node 2 scripts/ddp_train.py --static-graph
    python scripts/ddp_train.py            # one process, world size 1

What it shows:
- every rank builds the model from the same seed, and DDP broadcasts rank 0's
  weights at construction anyway, so all replicas start identical;
- DistributedSampler gives each rank a disjoint slice of the dataset;
  ``set_epoch`` reshuffles per epoch, identically on every rank;
- gradient accumulation: the first ``accum_steps - 1`` micro-batches run under
  ``model.no_sync()`` (no all-reduce), the last one all-reduces the summed
  gradients once;
- ``static_graph=True`` (optional) tells DDP the used parameters never change
  between iterations, which lets it skip some bookkeeping.  In torch 2.13,
  ``static_graph`` combined with ``no_sync()`` hits an internal assert and,
  worked around, stops all-reducing (pytorch/pytorch#143580, fix in #187732),
  so with ``--static-graph`` this script syncs every micro-batch instead:
  the same gradients, more communication.

DDP averages gradients over ranks, so with equal per-rank batches one step here
equals one step of a single process on the concatenation of all ranks' batches.
"""

from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _dist_common as common  # this folder's shared plumbing: copy it along with this file
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

IN_FEATURES = 16


def make_dataset(seed: int, n: int = 512) -> TensorDataset:
    """A noisy linear target; identical on every rank (the sampler splits it)."""
    g = torch.Generator().manual_seed(seed + 12345)
    x = torch.randn(n, IN_FEATURES, generator=g)
    w = torch.randn(IN_FEATURES, 1, generator=g)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=g))


def build_model(seed: int) -> nn.Module:
    common.seed_weights(seed)
    return nn.Sequential(nn.Linear(IN_FEATURES, 64), nn.ReLU(), nn.Linear(64, 1))


def make_loader(
    dataset, world_size: int, rank: int, batch_size: int, seed: int, pin_memory: bool = False
) -> DataLoader:
    # drop_last keeps every rank's batch count equal: DDP needs matching
    # collective calls on every rank (see join_uneven.py for the uneven case).
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    # Pinned host memory lets .to(device, non_blocking=True) copy asynchronously.
    return DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, drop_last=True, pin_memory=pin_memory
    )


def endless(loader: DataLoader):
    """Batches forever; each new pass over the data reshuffles via set_epoch."""
    epoch = 0
    while True:
        loader.sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def main(argv=None) -> None:
    p = common.base_parser(__doc__.splitlines()[0], steps=8, lr=0.05)
    p.add_argument(
        "--batch-size", type=common.positive_int, default=8, help="per rank, per micro-batch"
    )
    p.add_argument(
        "--accum-steps",
        type=common.positive_int,
        default=2,
        help="micro-batches per optimizer step",
    )
    p.add_argument("--static-graph", action="store_true")
    args = p.parse_args(argv)

    with common.distributed(args) as d:
        model = build_model(args.seed).to(d.device)
        # device_ids only for accelerators; on CPU DDP uses the module's device.
        # gradient_as_bucket_view: .grad are views into DDP's communication buckets, not
        # a second copy of every gradient (one model's worth of memory saved).
        ddp = DDP(
            model,
            device_ids=[d.device.index] if d.device.type != "cpu" else None,
            static_graph=args.static_graph,
            gradient_as_bucket_view=True,
        )
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)

        loader = make_loader(
            make_dataset(args.seed),
            d.world_size,
            d.rank,
            args.batch_size,
            args.seed,
            pin_memory=d.device.type == "cuda",
        )
        batches = endless(loader)
        losses = []
        for step in range(args.steps):
            step_loss = torch.zeros((), device=d.device)
            for micro in range(args.accum_steps):
                x, y = (t.to(d.device, non_blocking=True) for t in next(batches))
                sync = micro == args.accum_steps - 1 or args.static_graph
                # no_sync: gradients accumulate locally; the last backward syncs them all.
                with contextlib.nullcontext() if sync else ddp.no_sync():
                    loss = F.mse_loss(ddp(x), y) / args.accum_steps
                    loss.backward()
                step_loss += loss.detach()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(common.mean_across_ranks(step_loss))
            common.log_step(d, step, losses[-1])
        common.summary(
            d,
            __file__,
            losses,
            args.steps,
            accum_steps=args.accum_steps,
            static_graph=args.static_graph,
        )
        # Free DDP (its reducer holds the process group) before the group is
        # destroyed; with static_graph the late teardown otherwise aborts.
        del ddp, opt


if __name__ == "__main__":
    common.run(main)
