#!/usr/bin/env python
"""HSDP: fully_shard on a 2-D (replicate, shard) device mesh.

    torchrun --nproc-per-node 2 scripts/hsdp_train.py            # 1x2 mesh
    torchrun --nproc-per-node 4 scripts/hsdp_train.py            # 2x2 mesh
    torchrun --nnodes 4 --nproc-per-node 8 ... scripts/hsdp_train.py --shard-degree 8

Hybrid sharding: parameters are sharded inside each group of
``--shard-degree`` ranks (typically the GPUs of one node, on fast links) and
replicated across the ``--replicate-degree`` groups.  Forward all-gathers only
inside a shard group; backward reduce-scatters inside it, then all-reduces the
shards across replicas.  Less memory saving than sharding over everything,
much less cross-node traffic.

The mesh dims are named, so the rest of the code asks for ``mesh["dp_shard"]``
instead of remembering which axis is which.  Passing a 2-D mesh to
``fully_shard`` is all it takes: the first dim replicates, the second shards.
Every (replicate, shard) coordinate is its own data-parallel rank.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _dist_common as common  # this folder's shared plumbing: copy it along with this file
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

DIMS = ("dp_replicate", "dp_shard")


def apply_hsdp(model: common.ToyTransformer, mesh) -> None:
    for block in model.layers.values():
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def main(argv=None) -> None:
    p = common.base_parser(__doc__.splitlines()[0], steps=5, lr=1e-2)
    p.add_argument("--replicate-degree", type=int, default=0, help="0: world size / shard degree")
    p.add_argument("--shard-degree", type=int, default=0, help="0: 2 on an even world size, else 1")
    p.add_argument(
        "--batch-size", type=common.positive_int, default=4, help="per data-parallel rank"
    )
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument(
        "--check-parity",
        action="store_true",
        help="compare every local shard with a replicated reference each step",
    )
    args = p.parse_args(argv)
    shape = common.mesh_shape(
        common.world_size_from_env(), DIMS, args.replicate_degree, args.shard_degree
    )

    with common.distributed(args) as d:
        if args.check_parity:
            common.exact_fp32()  # TF32 would fail the 1e-5 comparison on CUDA
        mesh = init_device_mesh(d.device.type, shape, mesh_dim_names=DIMS)
        model = common.ToyTransformer().to(d.device)
        model.init_weights(args.seed)
        ref = None
        if args.check_parity:
            ref = common.ToyTransformer().to(d.device)
            ref.load_state_dict(model.state_dict())
            ref_opt = torch.optim.AdamW(ref.parameters(), lr=args.lr)
            worst = {"grad": 0.0, "param": 0.0}
        apply_hsdp(model, mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        # Row-major mesh: the global rank is also the flattened (replicate, shard) index.
        dp_rank = (
            mesh["dp_replicate"].get_local_rank() * shape[1] + mesh["dp_shard"].get_local_rank()
        )

        losses, norms = [], []
        for step in range(args.steps):
            x, y = (
                t.to(d.device)
                for t in common.token_batch(args.seed, dp_rank, step, args.batch_size)
            )
            loss = common.lm_loss(model(x), y)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
            norms.append(norm.full_tensor().item())  # before clipping, over both mesh dims
            if ref is not None:
                for r in range(d.world_size):
                    rx, ry = (
                        t.to(d.device)
                        for t in common.token_batch(args.seed, r, step, args.batch_size)
                    )
                    (common.lm_loss(ref(rx), ry) / d.world_size).backward()
                torch.nn.utils.clip_grad_norm_(ref.parameters(), args.max_norm)
                worst["grad"] = max(worst["grad"], common.max_shard_diff(model, ref, grads=True))
                ref_opt.step()
                ref_opt.zero_grad(set_to_none=True)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if ref is not None:
                worst["param"] = max(worst["param"], common.max_shard_diff(model, ref))
            losses.append(common.mean_across_ranks(loss))
            common.log_step(d, step, losses[-1])
        extra = {"parity": worst} if ref is not None else {}
        common.summary(
            d,
            __file__,
            losses,
            args.steps,
            mesh=dict(zip(DIMS, shape)),
            grad_norms=norms,
            placements=[str(pl) for pl in model.output.weight.placements],
            **extra,
        )


if __name__ == "__main__":
    common.run(main)
