"""Reproductions for references/guides/errors/checkpoint-dtensor-tp.md (DCP, state_dict APIs,
DTensor, DeviceMesh, tensor parallel). See errors_harness.py for the contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from errors_harness import captured_warnings, repro

# Some messages need two ranks. Re-creating a gloo process group between repros reuses the store
# keys of the previous group and is racy, so all 2-rank cases run in one separate torchrun job, on
# one process group, the first time any of them is asked for.
_TWO_RANK_CASES: dict = {}
_TWO_RANK_RESULTS: dict | None = None


def _on_two_ranks(entry_id: str):
    def register(fn):
        _TWO_RANK_CASES[entry_id] = fn

        @repro(entry_id)
        def _():
            return _two_rank_result(entry_id)

        return fn

    return register


def _two_rank_result(entry_id: str) -> str:
    global _TWO_RANK_RESULTS
    if _TWO_RANK_RESULTS is None:
        out = tempfile.mktemp(suffix=".json", prefix="ckpt_repro_")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
        }
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node=2",
                os.path.abspath(__file__),
                out,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        try:
            with open(out, encoding="utf-8") as f:
                _TWO_RANK_RESULTS = json.load(f)
            os.unlink(out)
        except OSError:
            _TWO_RANK_RESULTS = {"__launch__": proc.stderr[-2000:]}
    return (
        _TWO_RANK_RESULTS.get(entry_id) or f"no result: {_TWO_RANK_RESULTS.get('__launch__', '')}"
    )


def _run_two_rank_cases(out: str) -> None:
    import datetime

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    results = {}
    for entry_id, fn in _TWO_RANK_CASES.items():
        try:
            fn()
            results[entry_id] = "(no error raised)"
        except Exception as exc:  # noqa: BLE001
            results[entry_id] = "".join(
                traceback.format_exception(type(exc), exc, exc.__traceback__)
            )
        dist.barrier()
    if dist.get_rank() == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(results, f)
    dist.barrier()
    os._exit(0)


def _dcp():
    import torch.distributed.checkpoint as dcp

    return dcp


def _tmpdir() -> str:
    """A fresh directory every rank agrees on (rank 0 creates it, the others receive its name)."""
    path = [tempfile.mkdtemp(prefix="ckpt_repro_") if dist.get_rank() == 0 else None]
    if dist.get_world_size() > 1:
        dist.broadcast_object_list(path, src=0)
    return path[0]


def _mesh(shape=(1,), names=None):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", shape, mesh_dim_names=names)


# ---------------------------------------------------------------- DCP and state_dict APIs


@repro("dcp-missing-key")
def _():
    dcp = _dcp()
    ckpt = _tmpdir()
    model = nn.Linear(4, 4)
    dcp.save({"model": model.state_dict()}, checkpoint_id=ckpt)
    # The layer is now wrapped in a Sequential, so the keys became model.0.*.
    bigger = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    dcp.load({"model": bigger.state_dict()}, checkpoint_id=ckpt)


@repro("dcp-size-mismatch")
def _():
    dcp = _dcp()
    ckpt = _tmpdir()
    dcp.save({"model": nn.Linear(4, 8).state_dict()}, checkpoint_id=ckpt)
    dcp.load({"model": nn.Linear(4, 16).state_dict()}, checkpoint_id=ckpt)


class _ScaledTensor(torch.Tensor):
    """A tensor subclass that is not on torch.load's weights-only allowlist (like Float8 types)."""


@repro("dcp-load-tensor-subclass-weights-only")
def _():
    dcp = _dcp()
    ckpt = _tmpdir()
    dcp.save({"w": torch.arange(4.0).as_subclass(_ScaledTensor)}, checkpoint_id=ckpt)
    dcp.load({"w": torch.zeros(4).as_subclass(_ScaledTensor)}, checkpoint_id=ckpt)


@repro("dcp-load-no-process-group", pg=False)
def _():
    dcp = _dcp()
    ckpt = tempfile.mkdtemp(prefix="ckpt_repro_")
    with captured_warnings():
        dcp.save({"w": torch.ones(3)}, checkpoint_id=ckpt)
    with captured_warnings() as w:
        dcp.load({"w": torch.zeros(3)}, checkpoint_id=ckpt)
    return "\n".join(x for x in w if "load in a single process" in x)


@repro("dcp-metadata-not-found")
def _():
    dcp = _dcp()
    missing = os.path.join(_tmpdir(), "step_1000")  # never saved
    dcp.load({"w": torch.zeros(3)}, checkpoint_id=missing)


@repro("dcp-checkpoint-id-required")
def _():
    _dcp().save({"w": torch.ones(3)})


@repro("dcp-overwrite-existing")
def _():
    dcp = _dcp()
    ckpt = _tmpdir()
    dcp.save({"w": torch.ones(3)}, checkpoint_id=ckpt)
    with captured_warnings() as w:
        dcp.save({"w": torch.ones(3)}, checkpoint_id=ckpt)
    return "\n".join(x for x in w if "existing checkpoint" in x)


@repro("dcp-async-save-cpu-backend", pg=False)
def _():
    # A process group with only a CUDA-side backend, like init_process_group("nccl").
    dist.init_process_group("cuda:gloo", store=dist.HashStore(), rank=0, world_size=1)
    _dcp().async_save({"w": torch.ones(3)}, checkpoint_id=tempfile.mkdtemp(prefix="ckpt_repro_"))


@repro("dcp-partial-dtensor")
def _():
    from torch.distributed.tensor import DTensor, Partial

    loss = DTensor.from_local(torch.ones(()), _mesh(), [Partial()])
    _dcp().save({"loss": loss}, checkpoint_id=_tmpdir())


@repro("dcp-torch-load-distcp")
def _():
    dcp = _dcp()
    ckpt = _tmpdir()
    dcp.save({"model": nn.Linear(4, 4).state_dict()}, checkpoint_id=ckpt)
    torch.load(os.path.join(ckpt, "__0_0.distcp"))


@repro("dcp-bytes-vs-tensor-metadata")
def _():
    dcp = _dcp()
    ckpt = _tmpdir()
    dcp.save({"optim": {"lr": torch.tensor(0.1)}}, checkpoint_id=ckpt)  # lr was a tensor
    dcp.load({"optim": {"lr": 0.1}}, checkpoint_id=ckpt)  # and is a float now


@repro("dsd-flattened-missing-state")
def _():
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    opts = StateDictOptions(flatten_optimizer_state_dict=True)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[0].requires_grad_(False)  # frozen when saving
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    saved = get_optimizer_state_dict(model, optim, options=opts)
    resumed = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))  # a new run: all trainable
    fresh = torch.optim.AdamW(resumed.parameters(), lr=1e-3)
    set_optimizer_state_dict(resumed, fresh, saved, options=opts)


@repro("dcp-load-meta-no-process-group", pg=False)
def _():
    dcp = _dcp()
    ckpt = tempfile.mkdtemp(prefix="ckpt_repro_")
    with captured_warnings():  # the single-process notices
        dcp.save({"model": nn.Linear(4, 4).state_dict()}, checkpoint_id=ckpt)
        with torch.device("meta"):
            model = nn.Linear(4, 4)
        dcp.load({"model": model.state_dict()}, checkpoint_id=ckpt)


@repro("tp-prepare-input-length")
def _():
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, parallelize_module

    class Attention(nn.Module):
        def forward(self, h, freqs):
            return h * freqs

    style = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    attn = parallelize_module(Attention(), _mesh(), style)
    attn(torch.randn(2, 3, 4), torch.ones(4))


@repro("ddp-mesh-not-1d")
def _():
    from torch.nn.parallel import DistributedDataParallel as DDP

    DDP(nn.Linear(4, 4), device_mesh=_mesh((1, 1), ("dp", "tp")))


@repro("dcp-set-model-state-dict-kwarg")
def _():
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    model = nn.Linear(2, 2)
    set_model_state_dict(model, model.state_dict(), broadcast_from_rank0=True)


@repro("dcp-broadcast-needs-full-state-dict")
def _():
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    model = nn.Linear(2, 2)
    set_model_state_dict(
        model, model.state_dict(), options=StateDictOptions(broadcast_from_rank0=True)
    )


@repro("dcp-set-empty-state-dict")
def _():
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import fully_shard

    # A rank that did not read the file passes {}, but nothing asks for the broadcast.
    set_model_state_dict(
        fully_shard(nn.Linear(2, 2)), {}, options=StateDictOptions(full_state_dict=True)
    )


@repro("dcp-submodules-deprecated")
def _():
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    with captured_warnings() as w:
        get_model_state_dict(model, submodules={model[0]})
    return "\n".join(x for x in w if "submodules" in x)


@repro("dcp-missing-optimizer-state")
def _():
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    optim = torch.optim.AdamW(model.parameters())
    osd = get_optimizer_state_dict(model, optim)
    osd["state"].pop(
        "1.weight"
    )  # as if the layer was frozen, or added, when the checkpoint was written
    set_optimizer_state_dict(model, optim, optim_state_dict=osd)


@repro("dcp-optimizer-keyerror-param-groups")
def _():
    model = nn.Linear(2, 2)
    optim = torch.optim.AdamW(model.parameters())
    checkpoint = {"model": model.state_dict(), "optim": optim.state_dict()}
    optim.load_state_dict(checkpoint)  # the whole checkpoint instead of checkpoint["optim"]


@repro("dcp-optimizer-empty-param-groups")
def _():
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    model = nn.Linear(4, 4)
    groups = [{"params": list(model.parameters())}, {"params": []}, {"params": []}]
    optim = torch.optim.AdamW(groups)
    set_optimizer_state_dict(model, optim, get_optimizer_state_dict(model, optim))


@repro("dcp-optimizer-param-groups-mismatch")
def _():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    saved = torch.optim.AdamW(model.parameters()).state_dict()  # one group
    optim = torch.optim.AdamW(
        [{"params": model[0].parameters()}, {"params": model[1].parameters(), "lr": 1e-4}]
    )
    optim.load_state_dict(saved)


# ---------------------------------------------------------------- DTensor


@repro("dtensor-stack-same-mesh")
def _():
    from torch.distributed.fsdp import fully_shard

    dp_mesh = _mesh((1,))
    mesh_2d = _mesh((1, 1), ("dp", "tp"))
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    fully_shard(model[0], mesh=dp_mesh)
    fully_shard(model[1], mesh=mesh_2d["tp"])  # a second mesh object
    model(torch.randn(2, 4)).sum().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)


@repro("dtensor-clip-grad-mixed-plain")
def _():
    from torch.distributed.fsdp import fully_shard

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    fully_shard(model[0], mesh=_mesh((1,)))  # model[1] keeps plain parameters
    model(torch.randn(2, 4)).sum().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)


@repro("dtensor-different-meshes")
def _():
    from torch.distributed.tensor import DTensor, Replicate, Shard

    a = DTensor.from_local(torch.ones(4, 4), _mesh((1,)), [Shard(0)])
    b = DTensor.from_local(torch.ones(4, 4), _mesh((1, 1), ("dp", "tp")), [Replicate(), Shard(0)])
    return a * b


@repro("dtensor-tolist")
def _():
    from torch.distributed.tensor import Replicate, distribute_tensor

    logits = distribute_tensor(torch.randn(2, 3), _mesh(), [Replicate()])
    logits.argmax(-1).tolist()


@repro("dtensor-numpy")
def _():
    from torch.distributed.tensor import Replicate, distribute_tensor

    weight = distribute_tensor(torch.randn(2, 3), _mesh(), [Replicate()])
    weight.detach().numpy()


@repro("dtensor-data-pointer-invalid-storage")
def _():
    from torch.distributed.tensor import Shard, distribute_tensor

    weight = distribute_tensor(torch.randn(4, 3), _mesh(), [Shard(0)])
    weight.untyped_storage().data_ptr()  # what safetensors' save_file does with each tensor


@repro("dtensor-cross-mesh-redistribute")
def _():
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    x = distribute_tensor(torch.ones(4, 4), _mesh((1,)), [Shard(0)])
    x.redistribute(_mesh((1, 1), ("dp", "tp"))["tp"], [Replicate()])


@repro("dtensor-redistribute-to-partial")
def _():
    from torch.distributed.tensor import Partial, Replicate, distribute_tensor

    mesh = _mesh((1,))
    distribute_tensor(torch.ones(4), mesh, [Replicate()]).redistribute(mesh, [Partial()])


@_on_two_ranks("dtensor-inconsistent-metadata")
def _():
    from torch.distributed.tensor import DTensor, Shard

    local = torch.ones(2 + dist.get_rank(), 4)  # 2 rows on rank 0, 3 on rank 1
    DTensor.from_local(local, _mesh((2,)), [Shard(0)], run_check=True)


@_on_two_ranks("dtensor-uneven-flatten")
def _():
    from torch.distributed.tensor import Shard, distribute_tensor

    x = distribute_tensor(torch.ones(3, 4), _mesh((2,)), [Shard(0)])  # 3 rows over 2 ranks
    x.view(-1)


@repro("dtensor-numel1-implicit-replicate", world=2)
def _():
    from torch.distributed.tensor import Shard, distribute_tensor

    g = distribute_tensor(torch.randn(4, 4), _mesh((2,)), [Shard(0)])
    with captured_warnings() as w:
        g * torch.tensor([0.5])
    return next((t for t in w if "numel=1" in t), "(warning not emitted) " + " | ".join(w))


@repro("dtensor-op-no-strategy", world=2)
def _():
    from torch.distributed.tensor import Shard, distribute_tensor

    distribute_tensor(torch.randn(4, 6), _mesh((2,)), [Shard(0)]).renorm(2, 0, 1.0)


@repro("dtensor-c10d-collective")
def _():
    from torch.distributed.fsdp import fully_shard

    model = fully_shard(nn.Linear(2, 2), mesh=_mesh())
    for p in model.parameters():
        dist.broadcast(p, src=0)  # p is a DTensor


@repro("dtensor-from-local-shape-stride")
def _():
    from torch.distributed.tensor import DTensor, Shard

    DTensor.from_local(torch.ones(2, 4), _mesh(), [Shard(0)], shape=(2, 4))


# ---------------------------------------------------------------- DeviceMesh


@repro("mesh-bigger-than-world")
def _():
    _mesh((2, 4), ("dp", "tp"))  # 8 ranks wanted, the job has 1


@repro("mesh-slice-without-names")
def _():
    _mesh((1, 1))["tp"]


@repro("mesh-invalid-dim-names")
def _():
    _mesh((1, 1), ("dp_shard", "tp"))["dp"]


@repro("mesh-dim-names-unique")
def _():
    _mesh((1, 1), ("dp", "dp"))


@repro("mesh-dim-names-length")
def _():
    _mesh((1,), ("dp", "tp"))


@repro("mesh-device-type-index")
def _():
    from torch.distributed.device_mesh import init_device_mesh

    init_device_mesh("cuda:0", (1,))


@repro("mesh-get-group-ndim")
def _():
    _mesh((1, 1), ("dp", "tp")).get_group()


@repro("mesh-slice-flattened-deprecated")
def _():
    mesh = _mesh((1, 1, 1), ("dp_replicate", "dp_shard", "cp"))
    mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
    with captured_warnings() as w:
        mesh["dp_shard_cp"]
    return "\n".join(x for x in w if "flattened dim" in x)


# ---------------------------------------------------------------- tensor parallel


@repro("tp-style-unsupported-module")
def _():
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    block = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    parallelize_module(block, _mesh(), {"1": ColwiseParallel()})


class _Attention(nn.Module):
    def __init__(self, dim=6, n_heads=3):
        super().__init__()
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.head_dim)  # local heads: the -1
        return self.wo(q.flatten(2))


@_on_two_ranks("tp-heads-not-divisible")
def _():
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    attn = parallelize_module(
        _Attention(dim=6, n_heads=3),
        _mesh((2,)),
        {"wq": ColwiseParallel(), "wo": RowwiseParallel()},
    )
    attn(torch.randn(2, 5, 6))  # 3 heads cannot be split over 2 ranks


@_on_two_ranks("tp-rowwise-input-not-sharded")
def _():
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

    proj = parallelize_module(nn.Linear(8, 4), _mesh((2,)), RowwiseParallel())
    proj(torch.randn(3, 8))  # a full input, but RowwiseParallel expects the last dim sharded


@repro("tp-parallelize-twice")
def _():
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    mesh = _mesh()
    layer = parallelize_module(nn.Linear(4, 4), mesh, ColwiseParallel())
    parallelize_module(layer, mesh, ColwiseParallel())


@repro("tp-loss-parallel-placements")
def _():
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel, parallelize_module

    head = parallelize_module(
        nn.Linear(4, 10),
        _mesh(),
        ColwiseParallel(output_layouts=Replicate(), use_local_output=False),
    )
    logits = head(torch.randn(3, 4))
    with loss_parallel():
        F.cross_entropy(logits, torch.randint(0, 10, (3,)))


@repro("tp-loss-parallel-mean-nd-mesh")
def _():
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel

    mesh = _mesh((1, 1), ("dp", "tp"))
    logits = distribute_tensor(torch.randn(4, 10), mesh, [Shard(0), Shard(1)])
    target = distribute_tensor(torch.randint(0, 10, (4,)), mesh, [Shard(0), Replicate()])
    with loss_parallel():
        F.cross_entropy(logits, target)


@repro("tp-sp-residual-mixed", world=2)
def _():
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    class PostNormBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.w1, self.w2 = nn.LayerNorm(8), nn.Linear(8, 16), nn.Linear(16, 8)

        def forward(self, x):
            h = self.norm(x)  # the residual: a DTensor sharded on the sequence
            return h + self.w2(self.w1(h))  # w2 returns a plain (AsyncCollectiveTensor) shard

    block = parallelize_module(
        PostNormBlock(),
        _mesh((2,)),
        {
            "norm": SequenceParallel(),
            "w1": ColwiseParallel(input_layouts=Shard(1)),
            "w2": RowwiseParallel(output_layouts=Shard(1)),  # use_local_output=True by default
        },
    )
    block(torch.randn(2, 4, 8))


@repro("tp-loss-mixed-logits-labels", world=2)
def _():
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    torch.manual_seed(0)  # the same batch on both ranks, as TP expects
    head = parallelize_module(
        nn.Linear(4, 10),
        _mesh((2,)),
        ColwiseParallel(output_layouts=Replicate(), use_local_output=False),
    )
    logits = head(torch.randn(3, 4))  # a replicated DTensor
    F.cross_entropy(logits, torch.randint(0, 10, (3,)))  # plain labels


@repro("dtensor-partition-fn-apply-swap")
def _():
    from torch.distributed.tensor import Shard, distribute_module, distribute_tensor

    def shard_params(name, module, mesh):  # the old README's way
        module._apply(lambda t: distribute_tensor(t, mesh, [Shard(0)]))

    distribute_module(nn.Sequential(nn.Linear(4, 4)), _mesh(), partition_fn=shard_params)


if __name__ == "__main__":  # the 2-rank job started by _two_rank_result
    _run_two_rank_cases(sys.argv[1])
