"""Reproductions for references/guides/errors/fsdp.md (see errors_harness.py).

FSDP2 (`fully_shard`), FSDP1 (`FullyShardedDataParallel`), mixed precision / gradient scaling,
CPU offload, meta-device init and activation checkpointing. Everything runs on CPU with gloo;
FSDP1 runs on CPU only with `device_id=torch.device("cpu")`.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
from errors_harness import captured_warnings, repro
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    MixedPrecisionPolicy,
    ShardingStrategy,
    StateDictType,
    fully_shard,
)
from torch.distributed.fsdp import (
    FullyShardedDataParallel as FSDP,
)
from torch.utils.checkpoint import checkpoint

CPU = torch.device("cpu")


def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))


def _warning(texts: list[str], needle: str) -> str:
    """The one captured warning that contains `needle` (the repro's own message)."""
    hits = [t for t in texts if needle in t]
    return hits[0] if hits else "(warning not emitted) " + " | ".join(texts)


class _Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(16, 4)
        self.head = nn.Linear(4, 16)

    def forward(self, ids):
        return self.head(self.tok(ids))


# --- FSDP2: fully_shard ------------------------------------------------------------------


@repro("fsdp-mixed-tensor-dtensor")
def _():
    model = _Embed()
    fully_shard(model)  # only the root: tok/head are not FSDP modules
    model.tok(torch.tensor([1, 2]))  # submodule called outside the root forward


@repro("fsdp-load-full-state-dict")
def _():
    model = _mlp()
    fully_shard(model)
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    model.load_state_dict(full)  # plain tensors into DTensor parameters


@repro("fsdp-full-state-dict-shape-mismatch", world=2)
def _():
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    model = nn.Sequential(nn.Embedding(16, 4), nn.Linear(4, 4))
    fully_shard(model)
    full = nn.Sequential(nn.Embedding(20, 4), nn.Linear(4, 4)).state_dict()  # a larger vocab
    opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, full, options=opts)


@repro("fsdp-tied-params-separate-groups")
def _():
    model = nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False))
    model[1].weight = model[0].weight  # tied
    fully_shard(model[0])
    fully_shard(model[1])
    fully_shard(model)
    model(torch.randn(2, 4))


@repro("fsdp-container-without-forward")
def _():
    fully_shard(nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]))


@repro("fsdp-uniform-param-dtype")
def _():
    model = _mlp()
    model[2].to(torch.bfloat16)  # one group, two storage dtypes
    fully_shard(model)
    model(torch.randn(2, 4))


@repro("fsdp-deepcopy")
def _():
    model = _mlp()
    fully_shard(model)
    copy.deepcopy(model)  # e.g. an EMA copy made after sharding


@repro("fsdp-non-contiguous-param")
def _():
    lin = nn.Linear(4, 4)
    lin.weight = nn.Parameter(torch.randn(4, 4).t())  # transposed view: strides (1, 4)
    fully_shard(lin)


@repro("fsdp-mp-dtype-mismatch")
def _():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(4, 4)
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            return self.proj(self.inner(x))

    model = Block()
    fully_shard(model.inner, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    fully_shard(model)  # root keeps fp32 compute
    model(torch.randn(2, 4))


@repro("fsdp-view-output-warning")
def _():
    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x).view(-1)

    model = Flat()
    fully_shard(model)
    with captured_warnings() as w:
        model(torch.randn(2, 4))
    return _warning(w, "returned a view tensor")


@repro("fsdp-cpu-offload-pin-memory")
def _():
    fully_shard(nn.Linear(4, 4), offload_policy=CPUOffloadPolicy())  # pin_memory=True, no GPU


@repro("fsdp-cpu-offload-params-not-on-cpu", device="cuda")
def _():
    torch.cuda.set_device(0)
    with torch.device("meta"):
        model = nn.Linear(4, 4)
    fully_shard(model, offload_policy=CPUOffloadPolicy())
    model.to_empty(device="cuda")  # materialized on the GPU instead of the CPU
    model(torch.randn(2, 4, device="cuda"))


# --- meta-device init ----------------------------------------------------------------------


@repro("fsdp-meta-to-device")
def _():
    with torch.device("meta"):
        model = _mlp()
    model.to("cpu")


@repro("fsdp-meta-tensor-expected-device")
def _():
    with torch.device("meta"):
        model = _mlp()
    model(torch.randn(2, 4))  # forward before materializing


@repro("fsdp-scalar-parameter")
def _():
    model = _mlp()
    model[0].scale = nn.Parameter(torch.tensor(1.0))  # a 0-D parameter
    fully_shard(model)


@repro("fsdp-grad-dtype-after-frozen-first-forward")
def _():
    model = _mlp()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    fully_shard(model[0], mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    model.requires_grad_(False)
    model(torch.randn(2, 4))  # the first forward initializes FSDP with nothing trainable
    model.requires_grad_(True)
    model(torch.randn(2, 4)).sum().backward()


# --- FSDP1: FullyShardedDataParallel ------------------------------------------------------


@repro("fsdp1-no-accelerator")
def _():
    FSDP(_mlp())  # no device_id on a CPU-only machine


@repro("fsdp1-non-root-is-root")
def _():
    model = _mlp()
    model[0] = FSDP(model[0], device_id=CPU)
    root = FSDP(model, device_id=CPU)
    with FSDP.summon_full_params(model[0]):  # the inner module first: it becomes a root
        pass
    root(torch.randn(2, 4))


@repro("fsdp1-world-size-one-no-shard")
def _():
    with captured_warnings() as w:
        FSDP(_mlp(), device_id=CPU)  # default FULL_SHARD on a one-rank group
    return _warning(w, "NO_SHARD")


@repro("fsdp1-hybrid-manual-wrap")
def _():
    FSDP(_mlp(), device_id=CPU, sharding_strategy=ShardingStrategy.HYBRID_SHARD)


@repro("fsdp1-uniform-requires-grad")
def _():
    model = _mlp()
    model[0].weight.requires_grad_(False)  # frozen weight, trainable bias in one FlatParameter
    FSDP(model, device_id=CPU)


@repro("fsdp1-uniform-dtype")
def _():
    model = _mlp()
    model[2].to(torch.bfloat16)
    FSDP(model, device_id=CPU)


@repro("fsdp1-integer-param-flatten")
def _():
    model = nn.Module()
    # A packed 4-bit weight as bitsandbytes stores it: frozen uint8, the unit's first parameter.
    model.qweight = nn.Parameter(torch.zeros(8, 2, dtype=torch.uint8), requires_grad=False)
    model.lora = nn.Linear(4, 4)
    FSDP(model, device_id=CPU)


@repro("fsdp1-inconsistent-compute-device")
def _():
    # The same check as cuda:0 vs cuda:N; on CPU it is reached through parameters left on
    # meta by a param_init_fn that never calls to_empty (meta vs cpu).
    with torch.device("meta"):
        model = _mlp()
    FSDP(model, device_id=CPU, param_init_fn=lambda m: None)


@repro("fsdp1-tp-process-group", world=4)
def _():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = _mlp()
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    FSDP(model, process_group=mesh["dp"].get_group(), device_id=CPU)  # not device_mesh=


@repro("fsdp1-sync-module-states-cpu")
def _():
    FSDP(_mlp(), device_id=CPU, sync_module_states=True)


@repro("fsdp1-state-dict-type-deprecated")
def _():
    model = FSDP(_mlp(), device_id=CPU)
    with captured_warnings() as w:
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
            model.state_dict()
    return _warning(w, "FSDP.state_dict_type()")


@repro("fsdp1-inference-mode-grad-fn", world=2)
def _():
    model = FSDP(_mlp(), device_id=CPU)
    with torch.inference_mode():  # an evaluation pass
        model(torch.randn(2, 4))
    model(torch.randn(2, 4)).sum().backward()


class _StepInForward(nn.Module):
    """A training step written as a forward: backward runs inside the wrapped forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        loss = self.lin(x).sum()
        loss.backward()
        return loss.detach()


@repro("fsdp1-backward-inside-forward", world=2)
def _():
    FSDP(_StepInForward(), device_id=CPU)(torch.randn(2, 4))


@repro("fsdp-sharded-weights-saved", world=2)
def _():
    model = FSDP(_mlp(), device_id=CPU, use_orig_params=True)
    pieces = (
        model.module.state_dict()
    )  # the inner module: this rank's flat slices, not full weights
    _mlp().load_state_dict(pieces)  # as a single-process loader would


@repro("fsdp1-no-shard-deprecated", world=2)
def _():
    with captured_warnings() as w:
        FSDP(_mlp(), device_id=CPU, sharding_strategy=ShardingStrategy.NO_SHARD)
    return _warning(w, "NO_SHARD")


# --- mixed precision and gradient scaling ----------------------------------------------------


@repro("fsdp-gradscaler-unscale-fp16")
def _():
    model = nn.Linear(4, 4).half()  # fp16 master weights
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.randn(2, 4).half()).float().sum()).backward()
    scaler.unscale_(optim)


@repro("fsdp-cuda-amp-gradscaler-deprecated")
def _():
    with captured_warnings() as w:
        torch.cuda.amp.GradScaler()
    return _warning(w, "torch.cuda.amp.GradScaler(args...)")


@repro("fsdp-cuda-amp-autocast-deprecated")
def _():
    with captured_warnings() as w:
        with torch.cuda.amp.autocast():
            pass
    return _warning(w, "torch.cuda.amp.autocast(args...)")


@repro("fsdp-gradscaler-cuda-unavailable")
def _():
    with captured_warnings() as w:
        torch.amp.GradScaler("cuda")
    return _warning(w, "CUDA is not available")


# --- activation checkpointing -------------------------------------------------------------


@repro("ac-backward-twice")
def _():
    lin = nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    loss = checkpoint(lin, x, use_reentrant=False).sum()
    loss.backward()
    loss.backward()


@repro("ac-recomputed-metadata-mismatch")
def _():
    calls = {"n": 0}

    def block(x):  # depends on state that changes between the two runs
        calls["n"] += 1
        return (x if calls["n"] == 1 else x[:1]).sin()

    x = torch.randn(2, 4, requires_grad=True)
    checkpoint(block, x, use_reentrant=False).sum().backward()


@repro("ac-unpacked-twice")
def _():
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors[0], ctx.saved_tensors[0]  # unpacked twice
            return grad * 2 + 0 * a * b

    x = torch.randn(3, requires_grad=True)
    checkpoint(lambda t: Twice.apply(t).sin(), x, use_reentrant=False).sum().backward()


@repro("ac-different-number-saved")
def _():
    calls = {"n": 0}

    def block(x):
        calls["n"] += 1
        return x.sin().cos() if calls["n"] == 1 else x.sin()

    x = torch.randn(2, 4, requires_grad=True)
    checkpoint(block, x, use_reentrant=False).sum().backward()


@repro("ac-use-reentrant-not-passed")
def _():
    x = torch.randn(2, 4, requires_grad=True)
    with captured_warnings() as w:
        checkpoint(nn.Linear(4, 4), x)
    return _warning(w, "use_reentrant parameter should be passed explicitly")


@repro("ac-no-input-requires-grad")
def _():
    with captured_warnings() as w:
        checkpoint(nn.Linear(4, 4), torch.randn(2, 4), use_reentrant=True)
    return _warning(w, "None of the inputs have requires_grad=True")


@repro("ac-element-0-no-grad-fn")
def _():
    frozen = nn.Linear(4, 4).requires_grad_(False)  # e.g. a frozen base model under LoRA
    out = checkpoint(frozen, torch.randn(2, 4), use_reentrant=True)
    out.sum().backward()


@repro("ac-reentrant-autograd-grad")
def _():
    x = torch.randn(2, 4, requires_grad=True)
    y = checkpoint(nn.Linear(4, 4), x, use_reentrant=True)
    torch.autograd.grad(y.sum(), x)


@repro("ac-wrapper-offload-kwarg")
def _():
    import functools

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    # The keyword an old FSDP example passes to the wrapper.
    wrapper = functools.partial(
        checkpoint_wrapper, offload_to_cpu=False, checkpoint_impl=CheckpointImpl.NO_REENTRANT
    )
    apply_activation_checkpointing(
        model, checkpoint_wrapper_fn=wrapper, check_fn=lambda m: isinstance(m, nn.Linear)
    )
    model(torch.randn(2, 4, requires_grad=True)).sum().backward()


@repro("ac-no-output-requires-grad")
def _():
    x = torch.randn(2, 4, requires_grad=True)
    y = checkpoint(lambda t: t.detach() * 2, x, use_reentrant=True)
    y.sum().backward()
