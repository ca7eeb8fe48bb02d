"""CPU emulation of fsdp2_train.py --cpu-offload on NCCL, for test_fsdp2.py (run under torchrun).

On CUDA with CPUOffloadPolicy, FSDP2 leaves the sharded gradients in host memory, and
``clip_grad_norm_`` all-reduces their partial norms there, over the group FSDP used.
With the default "nccl" that group has no backend for CPU tensors. Here gloo bound
to cuda only ("cuda:gloo") plays NCCL's part: the example's model is sharded with
fully_shard on a CPU mesh, gradients of ones are put in place (no forward: its
all-gathers would need the CPU backend too), and clipping runs as the example runs
it, first on that group, then on ``with_cpu_backend``'s. Each rank prints
``EMULATION <rank> <fixed spec> <outcome without> | <outcome with>``; the norm must be
sqrt(number of parameters), the same on both ranks (a local-only norm would be smaller).
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import _dist_common as common  # noqa: E402
import fsdp2_train  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

NCCL_LIKE = "cuda:gloo"  # one backend, bound to a device type the tensors are not on


def clip_once(tag: str, spec: str, store, rank: int, world: int) -> str:
    dist.init_process_group(
        spec,
        store=dist.PrefixStore(tag, store),
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=30),
    )
    try:
        mesh = init_device_mesh("cpu", (world,))
        with torch.device("meta"):
            model = common.ToyTransformer()
        fsdp2_train.apply_fsdp(model, mesh, MixedPrecisionPolicy(), OffloadPolicy(), True)
        model.to_empty(device="cpu")
        for p in model.parameters():
            p.grad = DTensor.from_local(
                torch.ones_like(p.to_local()),
                p.device_mesh,
                p.placements,
                shape=p.shape,
                stride=p.stride(),
            )
        try:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            return f"norm {norm.full_tensor().item():.6f} of {sum(p.numel() for p in model.parameters())}"
        except RuntimeError as e:
            return f"error {str(e).splitlines()[0]}"
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    """argv: unused; tests/examples/runs.py passes the examples' device and timeout flags."""
    store, rank, world = next(dist.rendezvous("env://", timeout=datetime.timedelta(seconds=30)))
    fixed = common.with_cpu_backend(NCCL_LIKE)
    broken = clip_once("without", NCCL_LIKE, store, rank, world)
    ok = clip_once("with", fixed, store, rank, world)
    print(f"EMULATION {rank} {fixed} {broken} | {ok}", flush=True)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # as the examples do after gloo
