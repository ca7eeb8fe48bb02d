"""Setups for the blocks of the collectives, DDP/ZeRO, debugging, device-mesh/TP, DTensor, launching
and uneven-inputs guides. Each public function fills the namespace a block assumes (see
tests/guides/blocks.py); names start with ``g2_``.
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.distributed as dist

# Importing torch.distributed.optim runs torch.jit.script/interface decorators inside torch, which
# emit DeprecationWarnings at import time (not caused by the guides' code). Import it once here,
# outside the blocks' warning check, so blocks that use ZeroRedundancyOptimizer are judged only on
# their own warnings.
import torch.distributed.optim  # noqa: F401,E402
import torch.nn as nn
import torch.nn.functional as F


def _tmp_dir(tag: str) -> str:
    """A directory shared by the ranks of this torchrun job (same path on every rank)."""
    run = os.environ.get("TORCHELASTIC_RUN_ID", "local")
    path = os.path.join(tempfile.gettempdir(), f"g2_{tag}_{run}")
    os.makedirs(path, exist_ok=True)
    return path


def _basics(ns: dict) -> None:
    ns.update(
        rank=dist.get_rank(),
        world=dist.get_world_size(),
        world_size=dist.get_world_size(),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        device=torch.device("cpu"),
    )


# ---------------------------------------------------------------- collectives-and-process-groups


def g2_loss(ns: dict) -> None:
    _basics(ns)
    ns["loss"] = torch.tensor(1.0 + dist.get_rank(), requires_grad=True) * 2


def g2_metrics(ns: dict) -> None:
    _basics(ns)
    ns.update(num_batches=10 + dist.get_rank(), correct=7, seen=9)


def g2_preds(ns: dict) -> None:
    _basics(ns)
    r = dist.get_rank()
    ns["ids"] = torch.arange(3) + 10 * r
    ns["out"] = torch.randn(3, 5)


def g2_broadcast(ns: dict) -> None:
    import uuid

    import torch.distributed.checkpoint as dcp

    _basics(ns)
    ns.update(
        dcp=dcp,
        state={},
        make_run_id=lambda: uuid.uuid4().hex[:8],
        ckpt_dir=os.path.join(_tmp_dir("bcast"), "no-checkpoint-yet"),
    )


def g2_flag(ns: dict) -> None:
    _basics(ns)
    calls = []
    ns.update(local_should_stop=dist.get_rank() == 1, save_and_exit=lambda: calls.append("saved"))


def g2_barrier(ns: dict) -> None:
    _basics(ns)
    data_dir = _tmp_dir("barrier")

    def download_and_preprocess(d):
        with open(os.path.join(d, "data.txt"), "w") as f:
            f.write("1 2 3\n")

    def load(d):
        with open(os.path.join(d, "data.txt")) as f:
            return f.read().split()

    ns.update(data_dir=data_dir, download_and_preprocess=download_and_preprocess, load=load)


def g2_tensor(ns: dict) -> None:
    """A small float tensor ``t``/``x``/``stats`` per rank, plus a tiny model."""
    _basics(ns)
    r = float(dist.get_rank())
    ns.update(
        t=torch.full((2,), r),
        x=torch.full((2,), r),
        stats=torch.tensor([r, 1.0]),
        model=nn.Linear(2, 2),
    )


def g2_train_fn(ns: dict) -> None:
    _basics(ns)
    ns["train"] = lambda: dist.all_reduce(torch.ones(1))


# ---------------------------------------------------------------- ddp-and-zero


class _Ds(torch.utils.data.Dataset):
    def __init__(self, n: int = 24):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 8, generator=g), torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def _build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def g2_ddp_script(ns: dict) -> None:
    """Names for the minimal DDP loop: a process group exists, the model is not wrapped yet."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    _basics(ns)
    ns.update(
        DDP=DDP,
        DataLoader=DataLoader,
        DistributedSampler=DistributedSampler,
        build_model=_build_model,
        dataset=_Ds(),
        loss_fn=F.cross_entropy,
        epochs=2,
    )


def g2_ddp_model(ns: dict) -> None:
    """A DDP-wrapped model, its optimizer and four micro-batches."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    _basics(ns)
    model = DDP(_build_model())
    ds = _Ds(16)
    ns.update(
        DDP=DDP,
        model=model,
        optim=torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=F.cross_entropy,
        micro_batches=[(ds.x[i : i + 4], ds.y[i : i + 4]) for i in range(0, 16, 4)],
    )


def g2_zero(ns: dict) -> None:
    """A DDP model and a directory shared by the ranks for the optimizer file."""
    g2_ddp_model(ns)
    ns["ckpt_dir"] = _tmp_dir("zero")


def g2_zero_saved(ns: dict) -> None:
    """Like g2_zero, plus a consolidated ZeRO state dict already saved at ckpt_dir/optim.pt."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    g2_zero(ns)
    model = ns["model"]
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=3e-4)
    x, y = ns["micro_batches"][0]
    F.cross_entropy(model(x), y).backward()
    opt.step()
    opt.consolidate_state_dict(to=0)
    if dist.get_rank() == 0:
        torch.save(opt.state_dict(), os.path.join(ns["ckpt_dir"], "optim.pt"))
    dist.barrier()


# ---------------------------------------------------------------- uneven-inputs-and-join


def _uneven_loader(extra: int):
    """Rank r gets 3 + r * extra batches of (x, y)."""
    g = torch.Generator().manual_seed(dist.get_rank())
    n = 3 + dist.get_rank() * extra
    return [
        (torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(n)
    ]


def g2_join(ns: dict) -> None:
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    _basics(ns)
    ddp_model = DDP(_build_model())
    ns.update(
        ddp_model=ddp_model,
        loader=_uneven_loader(2),
        loss_fn=F.cross_entropy,
        zero_optim=ZeroRedundancyOptimizer(
            ddp_model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1
        ),
    )


def g2_uneven_loader(ns: dict) -> None:
    _basics(ns)
    ns["loader"] = _uneven_loader(2)


def g2_eval(ns: dict) -> None:
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    _basics(ns)
    ns.update(
        val_set=_Ds(10),
        model=_build_model(),
        DataLoader=DataLoader,
        DistributedSampler=DistributedSampler,
    )


def g2_stream(ns: dict) -> None:
    """An IterableDataset whose length differs per rank (file shards of unequal size)."""

    class Shards(torch.utils.data.IterableDataset):
        def __init__(self, rank):
            self.n = 5 + 3 * rank

        def __iter__(self):
            for i in range(self.n):
                yield torch.full((8,), float(i)), torch.tensor(i % 4)

    _basics(ns)
    ns.update(stream=Shards(dist.get_rank()), model=_build_model(), loss_fn=F.cross_entropy)


# ---------------------------------------------------------------- device mesh, HSDP, TP, DTensor


def g2_mesh_shape(ns: dict) -> None:
    """Mesh sizes for 4 ranks: 2 x 2 for 2-D meshes, 1 x 2 x 2 for 3-D ones."""
    from torch.distributed.device_mesh import init_device_mesh

    _basics(ns)
    ns.update(dp=2, tp=2, n_replicas=1, n_shard=2, init_device_mesh=init_device_mesh)


def g2_mesh_loss(ns: dict) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    _basics(ns)
    ns.update(init_device_mesh=init_device_mesh, loss=torch.tensor(float(dist.get_rank())))


def g2_mesh_flat(ns: dict) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    _basics(ns)
    ns["mesh"] = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))


class _Attn(nn.Module):
    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))

    def forward(self, h):
        b, s, _ = h.shape
        q, k, v = (
            w(h).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class _Mlp(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.w1, self.w2 = nn.Linear(dim, 4 * dim, bias=False), nn.Linear(4 * dim, dim, bias=False)

    def forward(self, h):
        return self.w2(F.silu(self.w1(h)))


class _Block(nn.Module):
    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attn, self.mlp = _Attn(dim, n_heads), _Mlp(dim)

    def forward(self, h):
        h = h + self.attn(self.norm1(h))
        return h + self.mlp(self.norm2(h))


class _Toy(nn.Module):
    """A tiny transformer with the submodule names the TP plans in the guide use."""

    def __init__(self, vocab: int = 32, dim: int = 16, n_heads: int = 4, n_layers: int = 2):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(_Block(dim, n_heads) for _ in range(n_layers))
        self.norm, self.out = nn.RMSNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        h = self.tok(ids)
        for blk in self.layers:
            h = blk(h)
        return self.out(self.norm(h))


def g2_toy(ns: dict) -> None:
    """An unsharded toy transformer (same init on every rank) and ``fully_shard``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    _basics(ns)
    ns.update(dp=2, tp=2, num_nodes=2, gpus_per_node=2)  # 4 ranks
    torch.manual_seed(0)
    ns.update(model=_Toy(), fully_shard=fully_shard, init_device_mesh=init_device_mesh)


def g2_groups(ns: dict) -> None:
    """Process groups built by hand on 4 ranks: a DP group, and replicate/shard groups (2 x 2)."""
    g2_toy(ns)
    r = dist.get_rank()
    rep_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]  # same shard index
    shard_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # same replica index
    ns.update(
        my_dp_group=dist.group.WORLD,
        replicate_group=rep_groups[r % 2],
        shard_group=shard_groups[r // 2],
        n_replicas=2,
        n_shard=2,
    )


def g2_fsdp1(ns: dict) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy

    _basics(ns)
    ns.update(
        FSDP=FSDP,
        ShardingStrategy=ShardingStrategy,
        init_device_mesh=init_device_mesh,
        model=_build_model(),
    )


def g2_tp_fsdp(ns: dict) -> None:
    """The toy transformer after TP on mesh["tp"] and FSDP on mesh["dp"] (2 x 2, 4 ranks), plus a batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    _basics(ns)
    torch.manual_seed(0)
    model = _Toy()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    plan = {
        "attn.wq": ColwiseParallel(),
        "attn.wk": ColwiseParallel(),
        "attn.wv": ColwiseParallel(),
        "attn.wo": RowwiseParallel(),
        "mlp.w1": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(),
    }
    for blk in model.layers:
        parallelize_module(blk, mesh["tp"], plan)
        fully_shard(blk, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    g = torch.Generator().manual_seed(mesh["dp"].get_local_rank())  # same batch within a TP group
    ids = torch.randint(0, 32, (2, 6), generator=g)
    ns.update(model=model, mesh=mesh, ids=ids, x=ids)


def g2_tp_attn(ns: dict) -> None:
    """One block's attention after ColwiseParallel on a 1-D tp mesh of 4 ranks, and its input."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    _basics(ns)
    torch.manual_seed(0)
    blk = _Block(16, 4)
    tp_mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    parallelize_module(
        blk,
        tp_mesh,
        {
            "attn.wq": ColwiseParallel(),
            "attn.wk": ColwiseParallel(),
            "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(),
        },
    )
    ns.update(block=blk, tp_mesh=tp_mesh, h=torch.randn(2, 6, 16), b=2, s=6)


def g2_dtensor_model(ns: dict) -> None:
    """A 1-D mesh named dp over all ranks and a fully_shard-ed Sequential whose first weight is [8, 4]."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    _basics(ns)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp",))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    fully_shard(model, mesh=mesh)
    ns.update(mesh=mesh, model=model, reference=reference)


def g2_dtensor_d(ns: dict) -> None:
    """``mesh`` and a DTensor ``d`` of global shape [8, 2] sharded on dim 0."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    g2_dtensor_model(ns)
    ns.update(
        Shard=Shard,
        Replicate=Replicate,
        d=distribute_tensor(torch.arange(16.0).reshape(8, 2), ns["mesh"], [Shard(0)]),
    )


def g2_dtensor_ema(ns: dict) -> None:
    """A sharded parameter ``p``, a full-size plain ``ema``, its local slice and a plain copy."""
    from torch.distributed.tensor import distribute_tensor

    g2_dtensor_model(ns)
    p = ns["model"][0].weight
    ema = torch.zeros(p.shape)
    ns.update(
        p=p,
        ema=ema,
        distribute_tensor=distribute_tensor,
        ema_local=torch.zeros_like(p.to_local()),
        tensor=p.full_tensor().detach().clone(),
    )
