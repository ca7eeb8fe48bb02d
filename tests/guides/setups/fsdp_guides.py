"""Setups for the blocks of SKILL.md, fsdp2-quickstart, mixed-precision-and-memory,
fsdp1-to-fsdp2-migration and checkpointing (see tests/guides/blocks.py).

Each public function fills a block's namespace with the names its text assumes: a tiny
Transformer-shaped model on the CPU, a gloo mesh over the world, data, an optimizer, a shared
temporary checkpoint folder. Everything stays small: the blocks run on 2 CPU cores in CI.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, SEQ, BATCH = 32, 16, 8, 4


@dataclass
class _Cfg:
    vocab: int = VOCAB
    dim: int = DIM
    n_layers: int = 2


class _Block(nn.Module):
    def __init__(self, dim: int = DIM):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.ff(F.relu(self.norm(x)))


class _Transformer(nn.Module):
    def __init__(self, cfg: _Cfg | None = None, tie: bool = False):
        super().__init__()
        cfg = cfg or _Cfg()
        self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(_Block(cfg.dim) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.dim)
        self.output = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        if tie:
            self.output.weight = self.tok_embeddings.weight

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).flatten(0, 1)  # (batch*seq, vocab)

    @torch.no_grad()
    def generate(self, tokens, max_new_tokens: int = 2):
        for _ in range(max_new_tokens):
            nxt = (
                self.forward(tokens)
                .view(tokens.shape[0], -1, VOCAB)[:, -1]
                .argmax(-1, keepdim=True)
            )
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return x, torch.roll(x, -1, dims=1).flatten()


def _loss_fn(logits, y):
    return F.cross_entropy(logits.float(), y)


def _mesh():
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (dist.get_world_size(),))


def _shard(model, mesh, **kw):
    from torch.distributed.fsdp import fully_shard

    for block in model.layers:
        fully_shard(block, mesh=mesh, **kw)
    fully_shard(model, mesh=mesh, **kw)
    return model


_DIRS: list[str] = []


def _shared_dir() -> str:
    """One fresh folder that every rank of the job agrees on. The previous block's folder is
    removed once every rank has reached this (collective) call, so one run leaves one folder."""
    path = [tempfile.mkdtemp(prefix="g1_ckpt_") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(path, src=0)
    if dist.get_rank() == 0:
        while _DIRS:
            shutil.rmtree(_DIRS.pop(), ignore_errors=True)
        _DIRS.append(path[0])
    return path[0]


def g1_toy(ns: dict) -> None:
    """An unsharded toy model, its class and config, a CPU mesh, data and a loss."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        FSDPModule,
        MixedPrecisionPolicy,
        fully_shard,
        register_fsdp_forward_method,
    )

    torch.manual_seed(0)
    rank = dist.get_rank()
    ns.update(
        Transformer=_Transformer,
        TransformerBlock=_Block,
        cfg=_Cfg(),
        build_model=_Transformer,
        model=_Transformer(),
        mesh=_mesh(),
        loss_fn=_loss_fn,
        rank=rank,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        loader=[_batch(10 * rank + i) for i in range(2)],
        micro_batches=[_batch(100 + 10 * rank + i) for i in range(2)],
        init_device_mesh=init_device_mesh,
        fully_shard=fully_shard,
        FSDPModule=FSDPModule,
        MixedPrecisionPolicy=MixedPrecisionPolicy,
        CPUOffloadPolicy=CPUOffloadPolicy,
        register_fsdp_forward_method=register_fsdp_forward_method,
        mp=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
    )


def g1_script(ns: dict) -> None:
    """For blocks that create their own process group: model factory, loss and data only."""
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(0)
    ns.update(
        build_model=_Transformer, loss_fn=_loss_fn, loader=[_batch(10 * rank + i) for i in range(2)]
    )


def g1_sharded(ns: dict) -> None:
    """g1_toy, with the model sharded per block then root, an AdamW and one input batch."""
    g1_toy(ns)
    _shard(ns["model"], ns["mesh"])
    ns["optim"] = torch.optim.AdamW(ns["model"].parameters(), lr=1e-2)
    ns["x"], ns["y"] = ns["loader"][0]
    ns["inputs"] = {"tokens": ns["x"][:, :4]}
    ns["eval_loader"] = ns["loader"]


def g1_fp16(ns: dict) -> None:
    """A model sharded with an fp16 compute policy, its optimizer and a loss to scale."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    g1_toy(ns)
    _shard(ns["model"], ns["mesh"], mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16))
    ns["optim"] = torch.optim.AdamW(ns["model"].parameters(), lr=1e-3)
    x, y = ns["loader"][0]
    ns["loss"] = _loss_fn(ns["model"](x), y)


def g1_tp_fsdp(ns: dict) -> None:
    """4 ranks: TP on the blocks' linears over mesh["tp"], FSDP2 over mesh["dp"], grads set.

    The norms and the embedding stay 1-D DTensors on the dp mesh while the TP weights live
    on the 2-D mesh: the mixed-mesh case of the clipping section.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    class MLPBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(DIM)
            self.fc1, self.fc2 = nn.Linear(DIM, 2 * DIM), nn.Linear(2 * DIM, DIM)

        def forward(self, x):
            return x + self.fc2(F.relu(self.fc1(self.norm(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(VOCAB, DIM)
            self.layers = nn.ModuleList(MLPBlock() for _ in range(2))
            self.output = nn.Linear(DIM, VOCAB)

        def forward(self, tokens):
            h = self.tok_embeddings(tokens)
            for layer in self.layers:
                h = layer(h)
            return self.output(h).flatten(0, 1)

    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = Model()
    for block in model.layers:
        parallelize_module(block, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    x, y = _batch(mesh["dp"].get_local_rank())
    _loss_fn(model(x), y).backward()
    ns.update(model=model, mesh=mesh, max_norm=0.05)


def g1_fsdp1(ns: dict) -> None:
    """The names the FSDP1 snippets use: FSDP, its config classes, a policy and a device."""
    from torch.distributed.fsdp import (
        FullStateDictConfig,
        MixedPrecision,
        ShardingStrategy,
        StateDictType,
    )
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    g1_toy(ns)
    ns.update(
        FSDP=FSDP,
        ShardingStrategy=ShardingStrategy,
        MixedPrecision=MixedPrecision,
        StateDictType=StateDictType,
        FullStateDictConfig=FullStateDictConfig,
        transformer_auto_wrap_policy=transformer_auto_wrap_policy,
        functools=functools,
        policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={_Block}),
        device=torch.device("cpu"),
    )


def g1_fsdp1_wrapped(ns: dict) -> None:
    """g1_fsdp1 with the toy model already wrapped by FSDP1 (per block, then the root)."""
    g1_fsdp1(ns)
    ns["model"] = ns["FSDP"](ns["model"], auto_wrap_policy=ns["policy"], device_id=ns["device"])
    ns["inputs"] = {"tokens": ns["loader"][0][0][:, :4]}


def g1_dir(ns: dict) -> None:
    """g1_toy plus a shared empty folder `ckpt_dir`."""
    g1_toy(ns)
    ns["ckpt_dir"] = _shared_dir()


def g1_ckpt(ns: dict) -> None:
    """g1_sharded after one step, with a shared empty checkpoint folder `ckpt_dir`."""
    g1_sharded(ns)
    model, optim = ns["model"], ns["optim"]
    _loss_fn(model(ns["x"]), ns["y"]).backward()
    optim.step()
    optim.zero_grad()
    ns.update(ckpt_dir=_shared_dir(), step=1, save_every=1)


def g1_ckpt_saved(ns: dict) -> None:
    """g1_ckpt plus a DCP checkpoint of {"app": {"model", "optim"}} at ckpt_dir/step_1000."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    g1_ckpt(ns)
    msd, osd = get_state_dict(ns["model"], ns["optim"])
    dcp.save(
        {"app": {"model": msd, "optim": osd}, "step": 1000},
        checkpoint_id=f"{ns['ckpt_dir']}/step_1000",
    )


def g1_full_file(ns: dict) -> None:
    """A full torch.save checkpoint of a (tied) toy model at `path` and a sharded model built
    on the meta device with the same architecture, not yet allocated."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import fully_shard

    g1_toy(ns)
    ckpt_dir = _shared_dir()
    path = f"{ckpt_dir}/model.pt"
    if dist.get_rank() == 0:
        torch.manual_seed(1)
        torch.save(_Transformer(tie=True).state_dict(), path)
    dist.barrier()
    ns.update(
        ckpt_dir=ckpt_dir,
        path=path,
        StateDictOptions=StateDictOptions,
        set_model_state_dict=set_model_state_dict,
        fully_shard=fully_shard,
        Transformer=functools.partial(_Transformer, tie=True),
    )
