#!/usr/bin/env python
"""FSDP2 (fully_shard) training of a small transformer.

    torchrun --nproc-per-node 2 scripts/fsdp2_train.py
    torchrun --nproc-per-node 2 scripts/fsdp2_train.py --accum-steps 2 --check-parity
    torchrun --nproc-per-node 8 scripts/fsdp2_train.py --mixed-precision bf16 --cpu-offload  # CUDA
    python scripts/fsdp2_train.py           # one process, world size 1

Order of application (as in torchtitan), each step one small function below:
  1. build the model on the meta device: no memory, no init cost;
  2. apply_ac: activation checkpointing per transformer block;
  3. apply_fsdp: fully_shard each block, then the root (the root gets the
     embeddings, final norm and output layer, and drives the schedule);
  4. apply_prefetch: explicit forward/backward prefetch of the next block;
  5. materialise: ``to_empty`` allocates only the local shards, then
     ``init_weights`` writes the same values every rank would have had.

Training: gradient accumulation with ``set_requires_gradient_sync`` (no
reduce-scatter until the last micro-batch), gradient clipping on DTensor
gradients (``clip_grad_norm_`` computes the global norm across shards).

Mixed precision: ``--mixed-precision auto`` is bf16 parameters with fp32
gradient reduction on CUDA and off on CPU.  bf16 does run on CPU with gloo
(the reduction is fp32), but CPU bf16 matmuls are slow and the exact parity
checks need fp32, so CPU defaults to fp32.

``--cpu-offload`` (CPUOffloadPolicy) keeps sharded parameters, gradients and
optimizer state in host memory and copies them to the accelerator for
compute; it needs an accelerator, so on CPU the script refuses it.  Two
things come with it: the process group gets gloo for CPU tensors next to
NCCL (``cuda:nccl,cpu:gloo``), because clipping all-reduces the norms of the
host-side gradients; and buffers are moved to the accelerator by hand, since
the policy offloads parameters only.

``--check-parity`` turns TF32 off (fp32 matmuls at full precision); the
summary's ``fp32_precision`` says which mode a run had.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _dist_common as common  # this folder's shared plumbing: copy it along with this file
import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)


def apply_ac(model: common.ToyTransformer) -> None:
    """Recompute each block's activations in backward instead of storing them."""
    for name, block in model.layers.named_children():
        model.layers.register_module(name, checkpoint_wrapper(block))


def apply_fsdp(
    model: common.ToyTransformer,
    mesh,
    mp_policy: MixedPrecisionPolicy,
    offload_policy: OffloadPolicy,
    reshard_after_forward: bool,
) -> None:
    """Shard per block, then the root.

    Each block is one communication group: its parameters are all-gathered
    just before its forward and freed after (``reshard_after_forward=True``,
    ZeRO-3).  ``False`` keeps them gathered until backward (ZeRO-2-like: more
    memory, one all-gather fewer).  The root is not resharded after forward
    because backward needs its parameters first anyway.
    """
    kw = dict(mesh=mesh, mp_policy=mp_policy, offload_policy=offload_policy)
    for block in model.layers.values():
        fully_shard(block, reshard_after_forward=reshard_after_forward, **kw)
    fully_shard(model, reshard_after_forward=False, **kw)


def apply_prefetch(model: common.ToyTransformer) -> None:
    """Issue the next block's all-gather before the current one computes.

    FSDP2 already overlaps one block ahead implicitly; explicit lists let you
    prefetch further (more memory) or fix the order for models whose forward
    order differs from registration order.
    """
    blocks = list(model.layers.values())
    for i, block in enumerate(blocks):
        if i + 1 < len(blocks):
            block.set_modules_to_forward_prefetch([blocks[i + 1]])
        if i > 0:
            block.set_modules_to_backward_prefetch([blocks[i - 1]])


def resolve_mixed_precision(choice: str, device: torch.device) -> str:
    return ("bf16" if device.type == "cuda" else "off") if choice == "auto" else choice


def dtype_name(dtype: torch.dtype | None) -> str:
    """A policy's dtype as the summary reports it; None means the parameters' own (fp32)."""
    return str(dtype or torch.float32).removeprefix("torch.")


def mixed_precision(choice: str, device: torch.device) -> MixedPrecisionPolicy:
    if resolve_mixed_precision(choice, device) == "bf16":
        # Compute in bf16, reduce gradients in fp32: sums of many bf16 values lose bits.
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def materialize(model: nn.Module, device: torch.device, cpu_offload: bool) -> None:
    """Allocate the local shards (and buffers) of a meta-built model, uninitialised."""
    # With CPU offload the shards live on the host; FSDP copies them to the device for compute.
    model.to_empty(device="cpu" if cpu_offload else device)
    if cpu_offload:
        # The offload policy covers parameters only. A buffer left on the host
        # (RoPE tables; here the positions) meets device activations in forward
        # and fails there. torchtitan passes buffer_device for the same reason.
        for module in model.modules():
            for name, buf in module.named_buffers(recurse=False):
                setattr(module, name, buf.to(device))


def build_sharded_model(args, d: common.Dist, mesh) -> common.ToyTransformer:
    with torch.device("meta"):
        model = common.ToyTransformer()
    if args.ac:
        apply_ac(model)
    offload = OffloadPolicy()
    if args.cpu_offload:
        if d.device.type == "cpu":
            raise common.LaunchError(
                "--cpu-offload needs an accelerator (it offloads *from* the GPU); "
                "on a CPU-only machine the parameters are already in host memory"
            )
        offload = CPUOffloadPolicy()
    apply_fsdp(
        model,
        mesh,
        mixed_precision(args.mixed_precision, d.device),
        offload,
        args.reshard_after_forward,
    )
    if args.prefetch:
        apply_prefetch(model)
    materialize(model, d.device, args.cpu_offload)
    model.init_weights(args.seed)
    return model


def reference_model(args, device: torch.device) -> nn.Module:
    """Plain replicated copy with identical initial weights, for --check-parity."""
    ref = common.ToyTransformer().to(device)
    ref.init_weights(args.seed)
    return ref


def add_args(p) -> None:
    p.add_argument(
        "--batch-size", type=common.positive_int, default=4, help="per rank, per micro-batch"
    )
    p.add_argument(
        "--accum-steps",
        type=common.positive_int,
        default=1,
        help="micro-batches per optimizer step",
    )
    p.add_argument("--max-norm", type=float, default=1.0, help="gradient clipping threshold")
    p.add_argument("--mixed-precision", choices=["auto", "bf16", "off"], default="auto")
    p.add_argument(
        "--cpu-offload", action="store_true", help="CPUOffloadPolicy (needs an accelerator)"
    )
    p.add_argument("--no-reshard-after-forward", dest="reshard_after_forward", action="store_false")
    p.add_argument(
        "--no-ac", dest="ac", action="store_false", help="disable activation checkpointing"
    )
    p.add_argument(
        "--no-prefetch", dest="prefetch", action="store_false", help="disable explicit prefetch"
    )
    p.add_argument(
        "--check-parity",
        action="store_true",
        help="also train a replicated reference each step and report the largest "
        "per-shard parameter / gradient difference (fp32 only)",
    )


def main(argv=None) -> None:
    p = common.base_parser(__doc__.splitlines()[0], steps=6, lr=1e-2)
    add_args(p)
    args = p.parse_args(argv)

    with common.distributed(args, cpu_collectives=args.cpu_offload) as d:
        mp = resolve_mixed_precision(args.mixed_precision, d.device)
        if args.check_parity:
            if mp == "bf16":
                raise common.LaunchError(
                    "--check-parity compares fp32 numbers; add --mixed-precision off"
                )
            common.exact_fp32()
        mesh = init_device_mesh(d.device.type, (d.world_size,), mesh_dim_names=("dp_shard",))
        model = build_sharded_model(args, d, mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        if args.check_parity:
            ref = reference_model(args, d.device)
            ref_opt = torch.optim.AdamW(ref.parameters(), lr=args.lr)
            worst = {"loss": 0.0, "grad": 0.0, "param": 0.0}

        losses, norms = [], []
        for step in range(args.steps):
            step_loss = torch.zeros((), device=d.device)
            for micro in range(args.accum_steps):
                # Reduce-scatter gradients only on the last micro-batch; before
                # that they accumulate unsharded-locally (more memory, less traffic).
                model.set_requires_gradient_sync(micro == args.accum_steps - 1)
                x, y = (
                    t.to(d.device)
                    for t in common.token_batch(args.seed, d.rank, step, args.batch_size, micro)
                )
                loss = common.lm_loss(model(x), y) / args.accum_steps
                loss.backward()
                step_loss += loss.detach()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
            losses.append(common.mean_across_ranks(step_loss))
            norms.append(norm.full_tensor().item() if hasattr(norm, "full_tensor") else norm.item())

            if args.check_parity:
                # The reference sees every rank's batch: FSDP averages gradients
                # over ranks, so the reference averages the per-rank losses.
                ref_loss = 0.0
                for micro in range(args.accum_steps):
                    for r in range(d.world_size):
                        x, y = (
                            t.to(d.device)
                            for t in common.token_batch(args.seed, r, step, args.batch_size, micro)
                        )
                        part = common.lm_loss(ref(x), y) / (args.accum_steps * d.world_size)
                        part.backward()
                        ref_loss += part.item()
                torch.nn.utils.clip_grad_norm_(ref.parameters(), args.max_norm)
                worst["loss"] = max(worst["loss"], abs(ref_loss - losses[-1]))
                worst["grad"] = max(worst["grad"], common.max_shard_diff(model, ref, grads=True))

            opt.step()
            opt.zero_grad(set_to_none=True)
            if args.check_parity:
                ref_opt.step()
                ref_opt.zero_grad(set_to_none=True)
                worst["param"] = max(worst["param"], common.max_shard_diff(model, ref))
            common.log_step(d, step, losses[-1], grad_norm=f"{norms[-1]:.4f}")

        extra = {"parity": worst} if args.check_parity else {}
        policy = mixed_precision(mp, d.device)
        common.summary(
            d,
            __file__,
            losses,
            args.steps,
            grad_norms=norms,
            accum_steps=args.accum_steps,
            mixed_precision=mp,
            param_dtype=dtype_name(policy.param_dtype),
            reduce_dtype=dtype_name(policy.reduce_dtype or policy.param_dtype),
            ac=args.ac,
            prefetch=args.prefetch,
            cpu_offload=args.cpu_offload,
            reshard_after_forward=args.reshard_after_forward,
            **extra,
        )


if __name__ == "__main__":
    common.run(main)
