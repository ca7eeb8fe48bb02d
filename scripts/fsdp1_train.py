#!/usr/bin/env python
"""FSDP1 (FullyShardedDataParallel wrapper) training of a small transformer.

    torchrun --nproc-per-node 2 scripts/fsdp1_train.py
    torchrun --nproc-per-node 2 scripts/fsdp1_train.py --sharding-strategy SHARD_GRAD_OP
    torchrun --nproc-per-node 8 scripts/fsdp1_train.py --mixed-precision bf16   # CUDA
    torchrun --nproc-per-node 2 scripts/fsdp1_train.py --save-full model.pt     # full state dict

What it shows:
- ``transformer_auto_wrap_policy``: every transformer ``Block`` becomes its own
  FSDP unit (one flat parameter, gathered and freed as a unit); the rest goes
  to the root unit;
- ``ShardingStrategy``: FULL_SHARD (ZeRO-3), SHARD_GRAD_OP (ZeRO-2: parameters
  stay gathered between forward and backward), NO_SHARD (DDP-like);
- ``MixedPrecision``: bf16 parameters and buffers with fp32 gradient reduction
  (``auto`` = on for CUDA, off on CPU: see fsdp2_train.py for why);
- ``model.clip_grad_norm_``: FSDP1 needs its own method, since each rank sees
  only a shard of the gradients;
- ``state_dict_type``: FULL_STATE_DICT (gathered, offloaded to CPU, only on
  rank 0: what a non-distributed consumer wants; ``--save-full`` writes it
  with ``torch.save``) versus SHARDED_STATE_DICT (each rank keeps its shard:
  what a distributed checkpoint wants).

Moving to FSDP2 (fsdp2_train.py): replace the wrapper with ``fully_shard``
calls on each block and then the root (no auto-wrap policy: you call it
where you want units); ``ShardingStrategy`` becomes ``reshard_after_forward``
(True ~ FULL_SHARD, False ~ SHARD_GRAD_OP) plus a 2-D mesh for HYBRID_SHARD
(hsdp_train.py); ``MixedPrecision`` becomes ``MixedPrecisionPolicy``;
``FSDP.clip_grad_norm_`` becomes plain ``torch.nn.utils.clip_grad_norm_`` on
DTensor gradients; ``state_dict_type`` gives way to
``torch.distributed.checkpoint.state_dict.get_state_dict`` (dcp_checkpoint.py).
Parameters are DTensors per parameter instead of one flat buffer per unit,
so the optimizer and the state dict see the original parameter names.
"""

from __future__ import annotations

import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _dist_common as common  # this folder's shared plumbing: copy it along with this file
import torch
from torch.distributed.fsdp import (
    FullStateDictConfig,
    MixedPrecision,
    ShardedStateDictConfig,
    ShardingStrategy,
    StateDictType,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD")


def wrap_fsdp1(model: torch.nn.Module, d: common.Dist, strategy: str, mp: str) -> FSDP:
    """``mp``: "bf16" or "off" (already resolved from "auto")."""
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={common.Block})
    mixed = (
        MixedPrecision(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16
        )
        if mp == "bf16"
        else None
    )
    return FSDP(
        model,
        auto_wrap_policy=policy,
        sharding_strategy=ShardingStrategy[strategy],
        mixed_precision=mixed,
        # Passed even on CPU: without it FSDP1 looks for an accelerator and fails.
        device_id=d.device,
        # Original parameters (views into the flat shard) keep names intact
        # for the optimizer and make the FSDP2 migration easier.
        use_orig_params=True,
    )


def state_dict_report(model: FSDP, d: common.Dist, save_full: str | None) -> dict:
    """Take both state dict kinds; report what each rank holds; rank 0 saves the full one."""
    # offload_to_cpu moves gathered tensors off the GPU.  On a CPU run it must
    # stay off: in torch 2.13 the state dict then aliases freed unsharded
    # storage and cloning it segfaults.
    full_cfg = FullStateDictConfig(offload_to_cpu=d.device.type != "cpu", rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, full_cfg):
        full = model.state_dict()  # collective: every rank must call it
    if save_full and d.is_main:
        # Plain tensors under the original names: torch.load(..., weights_only=True)
        # reads it into an unwrapped model, with no process group.
        torch.save({k: v.clone() for k, v in full.items()}, save_full)
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig()):
        sharded = model.state_dict()
    # FSDP1 hands out the legacy ShardedTensor (FSDP2 and DCP use DTensor).
    local_numel = sum(
        sum(s.tensor.numel() for s in v.local_shards())
        if hasattr(v, "local_shards")
        else v.to_local().numel()
        if hasattr(v, "to_local")
        else v.numel()
        for v in sharded.values()
    )
    return {
        # rank0_only: the other ranks get an empty dict (no host memory spent).
        "full_keys": sorted(full),
        "sharded_local_numel": local_numel,
        "sharded_value_types": sorted({type(v).__name__ for v in sharded.values()}),
    }


def main(argv=None) -> None:
    p = common.base_parser(__doc__.splitlines()[0], steps=6, lr=1e-2)
    p.add_argument("--batch-size", type=common.positive_int, default=4, help="per rank")
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--sharding-strategy", choices=STRATEGIES, default="FULL_SHARD")
    p.add_argument(
        "--mixed-precision",
        choices=["auto", "bf16", "off"],
        default="auto",
        help="auto: bf16 on CUDA, off on CPU",
    )
    p.add_argument(
        "--save-full", metavar="FILE", help="rank 0 saves the gathered full state dict here"
    )
    args = p.parse_args(argv)

    with common.distributed(args) as d:
        mp = args.mixed_precision
        if mp == "auto":
            mp = "bf16" if d.device.type == "cuda" else "off"
        model = common.ToyTransformer()
        model.init_weights(args.seed)  # same on every rank; FSDP shards it in place
        model = wrap_fsdp1(model, d, args.sharding_strategy, mp)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

        losses, norms = [], []
        for step in range(args.steps):
            x, y = (
                t.to(d.device) for t in common.token_batch(args.seed, d.rank, step, args.batch_size)
            )
            loss = common.lm_loss(model(x), y)
            loss.backward()
            # The norm before clipping, over all shards.
            norms.append(model.clip_grad_norm_(args.max_norm).item())
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(common.mean_across_ranks(loss))
            common.log_step(d, step, losses[-1], grad_norm=f"{norms[-1]:.4f}")

        report = state_dict_report(model, d, args.save_full)
        common.summary(
            d,
            __file__,
            losses,
            args.steps,
            sharding_strategy=args.sharding_strategy,
            mixed_precision=mp,
            param_dtype="bfloat16" if mp == "bf16" else "float32",
            reduce_dtype="float32",
            grad_norms=norms,
            **report,
        )


if __name__ == "__main__":
    common.run(main)
