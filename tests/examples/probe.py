"""Run an example under torchrun with instruments on the FSDP2 internals it relies on.

    torchrun --nproc-per-node 2 tests/examples/probe.py fsdp2_train [script args...]

The example's own flags (AC, prefetch, reshard, accumulation) do not change
its numbers, so parity with a reference cannot tell whether they took effect.
This records what they should change, per optimizer step on every rank:

- ``forward``: calls of each transformer block's own forward; activation
  checkpointing runs it again in backward, so 2 per micro-batch with AC, 1 without;
- ``all_gather``: FSDP2 parameter all-gathers per group; with
  ``reshard_after_forward`` a block is gathered in forward and again in backward;
- ``reduce_scatter``: gradient reductions per group; accumulation with
  ``set_requires_gradient_sync(False)`` issues one per step, not one per micro-batch;
- ``order``: the first step's sequence of ``ag:<group>`` and ``fwd:<block>``
  events; explicit forward prefetch gathers block i+1 before block i computes;
- ``param_dtype``: the dtype of a block's weight inside its forward (the
  unsharded parameter, so bf16 under a bf16 MixedPrecisionPolicy).

PROBE_MUTATE breaks a feature on purpose, for the tests' negative checks:
``sync-every-micro`` makes ``set_requires_gradient_sync`` always sync.
PROBE_TF32=1 enables TF32 before the script runs, as a user's environment might.
Every rank writes its record to ``$PROBE_OUT/rank<R>.json`` after the script's summary.
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import torch  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402
from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402

steps: list[collections.Counter] = [collections.Counter()]
order: list[str] = []
dtypes: set[str] = set()
_current_group: list[str] = []
_mutate: list[str] = [""]  # the PROBE_MUTATE of the run in progress
_installed: list[bool] = [False]


def _step_done(optimizer, *_):
    # Only the sharded model's optimizer: --check-parity steps a plain reference too.
    first = optimizer.param_groups[0]["params"][0]
    if isinstance(first, DTensor):
        steps.append(collections.Counter())


def install() -> None:
    """The instruments, once per process; what they count is per run (see reset)."""
    if _installed[0]:
        return
    _installed[0] = True
    orig_unshard = pg.FSDPParamGroup.unshard

    def unshard(self, async_op: bool = False):
        before = self._all_gather_result
        out = orig_unshard(self, async_op)
        if before is None and self._all_gather_result is not None:  # a real gather was issued
            steps[-1][f"all_gather:{self._module_fqn or 'root'}"] += 1
            if len(steps) == 1:
                order.append(f"ag:{self._module_fqn or 'root'}")
        return out

    pg.FSDPParamGroup.unshard = unshard

    orig_post_backward = pg.FSDPParamGroup.post_backward

    def post_backward(self, *args):
        _current_group.append(self._module_fqn or "root")
        try:
            return orig_post_backward(self, *args)
        finally:
            _current_group.pop()

    pg.FSDPParamGroup.post_backward = post_backward

    orig_reduce = pg.foreach_reduce

    def foreach_reduce(*args, **kwargs):
        steps[-1][f"reduce_scatter:{_current_group[-1] if _current_group else '?'}"] += 1
        return orig_reduce(*args, **kwargs)

    pg.foreach_reduce = foreach_reduce
    register_optimizer_step_post_hook(_step_done)

    orig_sync = FSDPModule.set_requires_gradient_sync

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        if _mutate[0] == "sync-every-micro":
            requires_gradient_sync = True
        return orig_sync(self, requires_gradient_sync, recurse=recurse)

    FSDPModule.set_requires_gradient_sync = set_requires_gradient_sync


def reset() -> None:
    """Start a run: nothing counted yet, and this run's PROBE_MUTATE and PROBE_TF32."""
    steps[:] = [collections.Counter()]
    order.clear()
    dtypes.clear()
    _mutate[0] = os.environ.get("PROBE_MUTATE", "")
    if os.environ.get("PROBE_TF32") == "1":
        torch.set_float32_matmul_precision("high")  # TF32 for matmuls, the usual way


def _hook_blocks(model) -> None:
    for name, block in model.layers.named_children():
        inner = getattr(block, "_checkpoint_wrapped_module", block)

        def pre(module, args, name=name):
            steps[-1][f"forward:layers.{name}"] += 1
            dtypes.add(str(module.attention.wq.weight.dtype).removeprefix("torch."))
            if len(steps) == 1:
                order.append(f"fwd:layers.{name}")

        inner.register_forward_pre_hook(pre)


def run(mod, argv: list[str]) -> dict:
    """The example's main(argv) with its blocks hooked; this rank's record of the run."""
    reset()
    build = mod.build_sharded_model

    def build_and_hook(*args, **kwargs):
        model = build(*args, **kwargs)
        _hook_blocks(model)
        return model

    mod.build_sharded_model = build_and_hook
    try:
        mod.main(argv)
    finally:
        mod.build_sharded_model = build
    # The optimizer-step hook opened one more (empty) counter after the last step.
    per_step = [dict(c) for c in steps[:-1]]
    rank = int(os.environ.get("RANK", "0"))
    return {"rank": rank, "steps": per_step, "order": order[:], "param_dtype": sorted(dtypes)}


def main() -> None:
    name, argv = sys.argv[1], sys.argv[2:]
    mod = importlib.import_module(name)
    install()
    record = run(mod, argv)
    # A file per rank: lines that two ranks print at once can interleave.
    Path(os.environ["PROBE_OUT"], f"rank{record['rank']}.json").write_text(json.dumps(record))
    sys.stdout.flush()
    os._exit(0)  # as the examples do after gloo: skip a teardown that can abort under load


if __name__ == "__main__":
    main()
