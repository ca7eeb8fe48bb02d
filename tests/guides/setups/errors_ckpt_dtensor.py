"""Setups for the code blocks of references/guides/errors/checkpoint-dtensor-tp.md."""

from __future__ import annotations

import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn


def _shared_tmpdir() -> str:
    path = [tempfile.mkdtemp(prefix="errors_ckpt_") if dist.get_rank() == 0 else None]
    if dist.get_world_size() > 1:
        dist.broadcast_object_list(path, src=0)
    return path[0]


def _mesh(shape, names=None):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", shape, mesh_dim_names=names)


def errors_ckpt_dtensor_small_ckpt(ns: dict) -> None:
    """`ckpt`: a DCP checkpoint of {"model": nn.Sequential(nn.Linear(4, 4))}; `dcp` imported."""
    import torch.distributed.checkpoint as dcp

    ckpt = _shared_tmpdir()
    dcp.save({"model": nn.Sequential(nn.Linear(4, 4)).state_dict()}, checkpoint_id=ckpt)
    ns.update(dcp=dcp, ckpt=ckpt)


def errors_ckpt_dtensor_fsdp_model(ns: dict) -> None:
    """`model`: a two-layer FSDP2 model on a 1-D mesh of all ranks; `mesh`."""
    from torch.distributed.fsdp import fully_shard

    mesh = _mesh((dist.get_world_size(),))
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    ns.update(model=model, mesh=mesh)


def errors_ckpt_dtensor_two_mesh_grads(ns: dict) -> None:
    """`model`: layer 0 sharded on a 1-D mesh, layer 1 on a slice of a 2-D mesh, grads computed."""
    from torch.distributed.fsdp import fully_shard

    world = dist.get_world_size()
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    fully_shard(model[0], mesh=_mesh((world,)))
    fully_shard(model[1], mesh=_mesh((1, world), ("dp", "tp"))["tp"])
    model(torch.randn(2, 4)).sum().backward()
    ns.update(model=model)


def errors_ckpt_dtensor_tp_mesh(ns: dict) -> None:
    """`tp_mesh`: a 1-D mesh of all ranks named "tp"."""
    ns.update(tp_mesh=_mesh((dist.get_world_size(),), ("tp",)))


def errors_ckpt_dtensor_mixed_plain_grads(ns: dict) -> None:
    """`model`: layer 0 sharded by `fully_shard`, layer 1 left plain (plain-tensor grads); grads
    computed on the same batch on every rank."""
    from torch.distributed.fsdp import fully_shard

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    fully_shard(model[0], mesh=_mesh((dist.get_world_size(),)))
    model(torch.randn(2, 4)).sum().backward()
    ns.update(model=model)
