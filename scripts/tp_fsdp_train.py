#!/usr/bin/env python
"""2-D parallelism: tensor parallel (TP) inside, FSDP across, on a (dp, tp) mesh.

    torchrun --nproc-per-node 2 scripts/tp_fsdp_train.py            # dp=1 x tp=2
    torchrun --nproc-per-node 4 scripts/tp_fsdp_train.py            # dp=2 x tp=2
    torchrun --nproc-per-node 4 scripts/tp_fsdp_train.py --tp-degree 4

Order of application (as in torchtitan): TP first, then FSDP.
  1. apply_tp: inside each block, ``parallelize_module`` splits wq/wk/wv/w1
     by output columns (ColwiseParallel) and wo/w2 by input rows
     (RowwiseParallel), so each tp rank computes a slice of the heads and of
     the hidden layer and one all-reduce per sub-layer restores the output;
  2. apply_fsdp: ``fully_shard`` with the ``dp`` sub-mesh shards the (already
     TP-sharded) parameters across data-parallel ranks.
TP ranks of one dp group see the same batch; dp ranks see different ones.
The attention reshapes with ``-1`` heads, so it runs unchanged on the local
share of the heads.  ``--tp-degree`` must divide the number of heads.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _dist_common as common  # this folder's shared plumbing: copy it along with this file
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

DIMS = ("dp", "tp")


def apply_tp(model: common.ToyTransformer, tp_mesh) -> None:
    plan = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(),
    }
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, plan)


def apply_fsdp(model: common.ToyTransformer, dp_mesh) -> None:
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)


def clip_grad_norm_(params, max_norm: float) -> torch.Tensor:
    """Global gradient clipping across parameters that live on different meshes.

    TP'd weights are DTensors on the (dp, tp) mesh, the rest only on dp; torch's
    ``clip_grad_norm_`` stacks all norms and fails on mixed meshes.  So take
    each mesh group's norm, turn it into a plain tensor (``full_tensor``
    reduces the partial norms), and combine those.
    """
    params = [p for p in params if p.grad is not None]
    groups: dict = {}
    for p in params:
        groups.setdefault(getattr(p.grad, "device_mesh", None), []).append(p.grad)
    norms = []
    for grads in groups.values():
        n = torch.nn.utils.get_total_norm(grads)
        norms.append(n.full_tensor() if hasattr(n, "full_tensor") else n)
    total = torch.linalg.vector_norm(torch.stack(norms))
    # foreach=False: one fused multiply cannot span gradients on two meshes.
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach=False)
    return total


def main(argv=None) -> None:
    p = common.base_parser(__doc__.splitlines()[0], steps=5, lr=1e-2)
    p.add_argument("--dp-degree", type=int, default=0, help="0: world size / tp degree")
    p.add_argument("--tp-degree", type=int, default=0, help="0: 2 on an even world size, else 1")
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
    dp, tp = common.mesh_shape(common.world_size_from_env(), DIMS, args.dp_degree, args.tp_degree)
    if common.HEADS % tp:
        raise common.LaunchError(f"tp={tp} must divide the {common.HEADS} attention heads")

    with common.distributed(args) as d:
        if args.check_parity:
            common.exact_fp32()  # TF32 would fail the 1e-5 comparison on CUDA
        mesh = init_device_mesh(d.device.type, (dp, tp), mesh_dim_names=DIMS)
        model = common.ToyTransformer().to(d.device)
        model.init_weights(args.seed)
        ref = None
        if args.check_parity:
            ref = common.ToyTransformer().to(d.device)
            ref.load_state_dict(model.state_dict())
            ref_opt = torch.optim.AdamW(ref.parameters(), lr=args.lr)
            worst = {"grad": 0.0, "param": 0.0}
        apply_tp(model, mesh["tp"])
        apply_fsdp(model, mesh["dp"])
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        dp_rank = mesh["dp"].get_local_rank()

        losses, norms = [], []
        for step in range(args.steps):
            x, y = (
                t.to(d.device)
                for t in common.token_batch(args.seed, dp_rank, step, args.batch_size)
            )
            loss = common.lm_loss(model(x), y)
            loss.backward()
            norms.append(clip_grad_norm_(model.parameters(), args.max_norm).item())
            if ref is not None:
                for r in range(dp):
                    rx, ry = (
                        t.to(d.device)
                        for t in common.token_batch(args.seed, r, step, args.batch_size)
                    )
                    (common.lm_loss(ref(rx), ry) / dp).backward()
                torch.nn.utils.clip_grad_norm_(ref.parameters(), args.max_norm)
                worst["grad"] = max(worst["grad"], common.max_shard_diff(model, ref, grads=True))
                ref_opt.step()
                ref_opt.zero_grad(set_to_none=True)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(common.mean_across_ranks(loss))
            if ref is not None:
                worst["param"] = max(worst["param"], common.max_shard_diff(model, ref))
            common.log_step(d, step, losses[-1])
        wq = model.layers["0"].attention.wq.weight
        extra = {"parity": worst} if ref is not None else {}
        common.summary(
            d,
            __file__,
            losses,
            args.steps,
            mesh={"dp": dp, "tp": tp},
            grad_norms=norms,
            wq_placements=[str(pl) for pl in wq.placements],
            wq_local_shape=list(wq.to_local().shape),
            **extra,
        )


if __name__ == "__main__":
    common.run(main)
