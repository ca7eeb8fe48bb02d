"""Reproductions for references/guides/errors/ddp-and-process-groups.md (see errors_harness.py)."""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from errors_harness import captured_warnings, repro
from repro_launch import run_ranks
from torch.nn.parallel import DistributedDataParallel as DDP

# The catalog's fix blocks run on the same model that raised the error here.
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "guides", "setups")
)
from errors_ddp import _TwoHeads  # noqa: E402


class _BothHeads(_TwoHeads):
    """`forward(x, both=True)` uses both heads, otherwise only head `a`."""

    def forward(self, x, both=False):
        h = self.body(x)
        return self.a(h) + self.b(h) if both else self.a(h)


@contextlib.contextmanager
def _two_ranks(tag: str, seconds: float = 3.0):
    """A fresh gloo world for one repro (the repro is registered with pg=False).

    Its store keys live under a prefix of their own: a second group built on the keys an earlier
    group left in torchrun's store reads stale peer addresses and fails to connect. Ranks leave
    together, synchronised through the store, so a rank that failed early does not start the next
    repro while its peer is still waiting for a timeout.
    """
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=datetime.timedelta(seconds=30),
    )
    store = dist.PrefixStore(f"repro_ddp/{tag}/", store)
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(
        "gloo",
        store=store,
        rank=int(os.environ["RANK"]),
        world_size=world,
        timeout=datetime.timedelta(seconds=seconds),
    )
    try:
        yield
    finally:
        store.add("left", 1)
        deadline = time.monotonic() + 30
        while store.add("left", 0) < world and time.monotonic() < deadline:
            time.sleep(0.05)


# --- DDP ---------------------------------------------------------------------------------


@repro("ddp-unused-parameters", world=2, pg=False)
def _():
    with _two_ranks("ddp-unused-parameters"):
        model = DDP(_TwoHeads())
        x = torch.randn(2, 4)
        for _ in range(2):
            model(x).sum().backward()


@repro("ddp-static-graph-unused-then-used", world=2, pg=False)
def _():
    with _two_ranks("ddp-static-graph-unused-then-used"):
        model = DDP(_TwoHeads(), static_graph=True)
        x = torch.randn(2, 4)
        for step in range(3):
            model(x, use_b=step == 0).sum().backward()


@repro("ddp-static-graph-used-then-unused", world=2, pg=False)
def _():
    with _two_ranks("ddp-static-graph-used-then-unused"):
        model = DDP(_BothHeads(), static_graph=True)
        x = torch.randn(2, 4)
        for step in range(3):
            model(x, both=step == 0).sum().backward()


@repro("ddp-static-graph-first-step-no-sync", world=2, pg=False)
def _():
    with _two_ranks("ddp-static-graph-first-step-no-sync"):
        model = DDP(nn.Linear(4, 4), static_graph=True)
        with model.no_sync():  # the very first step accumulates
            model(torch.randn(2, 4)).sum().backward()
        model(torch.randn(2, 4)).sum().backward()


@repro("ddp-mark-variable-ready-twice", world=2, pg=False)
def _():
    from torch.utils.checkpoint import checkpoint

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            x = checkpoint(self.lin, x, use_reentrant=True)
            return checkpoint(self.lin, x, use_reentrant=True)

    with _two_ranks("ddp-mark-variable-ready-twice"):
        model = DDP(Net(), find_unused_parameters=True)
        for _ in range(2):
            model(torch.randn(2, 4, requires_grad=True)).sum().backward()


@repro("pg-gather-list-non-destination", world=2)
def _():
    t = torch.ones(2)
    if dist.get_rank() == 1:  # rank 0 would wait in the gather: only the wrong call is made
        dist.gather(t, gather_list=[torch.zeros(2), torch.zeros(2)], dst=0)


@repro("pg-send-to-self", world=2)
def _():
    dist.send(torch.ones(1), dst=dist.get_rank())  # every rank sends to itself: raises at once


@repro("ddp-no-attribute", world=2)
def _():
    class AE(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def encode(self, x):
            return self.lin(x)

    DDP(AE()).encode(torch.ones(1, 2))  # a method of the wrapped module


@repro("ddp-param-count-mismatch", world=2, pg=False)
def _():
    with _two_ranks("ddp-param-count-mismatch"):
        layers = [nn.Linear(2, 2) for _ in range(1 + dist.get_rank())]
        DDP(nn.Sequential(*layers))


@repro("ddp-inplace-modified", world=1)
def _():
    model = DDP(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model(torch.randn(2, 4))
    out.mean().backward(retain_graph=True)
    opt.step()  # updates, in place, weights the graph saved
    out.pow(2).mean().backward()  # a second backward through the same graph


@repro("ddp-zero-not-consolidated", world=2, pg=False)
def _():
    from torch.distributed.optim import ZeroRedundancyOptimizer

    with _two_ranks("ddp-zero-not-consolidated"):
        model = nn.Linear(2, 2)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
        opt.state_dict()


def _join_loop(steps_per_rank: tuple[int, int], **join_kwargs) -> None:
    """A DDP model trained on `steps_per_rank[rank]` batches inside `Join`."""
    from torch.distributed.algorithms.join import Join

    model = DDP(nn.Linear(2, 2))
    with Join([model], **join_kwargs):
        for _ in range(steps_per_rank[dist.get_rank()]):
            model(torch.randn(1, 2)).sum().backward()


@repro("join-uneven-input-skew", world=2, pg=False)
def _():
    with _two_ranks("join-uneven-input-skew", seconds=60), captured_warnings() as w:
        _join_loop((1002, 0))  # rank 1 shadows 1002 all-reduces
    return "\n".join(x for x in w if "skew" in x)


@repro("join-early-termination", world=2, pg=False)
def _():
    with _two_ranks("join-early-termination"):
        _join_loop((3, 1), throw_on_early_termination=True)


@repro("ddp-no-trainable-parameters", world=1)
def _():
    DDP(nn.Linear(2, 2).requires_grad_(False))


@repro("ddp-device-ids-cpu-module", world=1)
def _():
    DDP(nn.Linear(2, 2), device_ids=[0])


@repro("ddp-syncbn-cpu-module", world=1)
def _():
    DDP(nn.Sequential(nn.Linear(2, 2), nn.SyncBatchNorm(2)))


@repro("ddp-syncbn-cpu-input", world=1)
def _():
    nn.SyncBatchNorm(2)(torch.randn(4, 2))


@repro("ddp-lazy-uninitialized-params", world=1)
def _():
    DDP(nn.LazyLinear(2))


# --- process groups ----------------------------------------------------------------------


@repro("pg-not-initialized", pg=False)
def _():
    dist.all_reduce(torch.ones(1))


@repro("pg-init-twice", world=1)
def _():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


@repro("nccl-not-built-in", pg=False)
def _():
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)


@repro("pg-no-backend-for-device", pg=False)
def _():
    dist.init_process_group("cuda:gloo", store=dist.HashStore(), rank=0, world_size=1)
    dist.all_reduce(torch.ones(1))


@repro("pg-all-gather-into-tensor-deprecated", world=1)
def _():
    with captured_warnings() as w:
        dist.all_gather_into_tensor(torch.zeros(2), torch.ones(2))
    return "\n".join(w)


@repro("pg-reduce-scatter-tensor-deprecated", world=1)
def _():
    with captured_warnings() as w:
        dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(2))
    return "\n".join(w)


@repro("pg-invalid-tensor-size", world=2, pg=False)
def _():
    with _two_ranks("pg-invalid-tensor-size"):
        dist.all_gather([torch.zeros(2), torch.zeros(3)], torch.ones(2))


@repro("funcol-all-reduce-backward-sum-only", world=1)
def _():
    import torch.distributed._functional_collectives as funcol

    x = torch.ones(3, requires_grad=True)
    funcol.all_reduce(x, "avg", dist.group.WORLD).sum().backward()  # the forward passes


@repro("pg-tensors-must-be-contiguous", world=1)
def _():
    x = torch.randn(3, 4).t()  # a transposed view
    dist.all_to_all_single(torch.empty(4, 3), x)


# --- messages another rank's failure or a timeout produces: separate processes ------------

_PREAMBLE = """
import datetime, os, time
import torch, torch.distributed as dist
rank = int(os.environ["RANK"])
"""


@repro("ddp-grad-strides-bucket-view", world=1)
def _():
    ddp = DDP(nn.Conv2d(4, 8, 3))
    ddp.module.to(memory_format=torch.channels_last)  # the layout changes after wrapping
    x = torch.randn(2, 4, 8, 8).to(memory_format=torch.channels_last)
    with captured_warnings() as w:
        ddp(x).sum().backward()
    return "\n".join(w)


@contextlib.contextmanager
def _zero_log():
    """Collect what ZeroRedundancyOptimizer logs (its notices go to `logging`, not `warnings`)."""
    import logging

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    log = logging.getLogger("torch.distributed.optim.zero_redundancy_optimizer")
    keep = Keep()
    log.addHandler(keep)
    try:
        yield lines
    finally:
        log.removeHandler(keep)


@repro("zero-overlap-needs-functional-optimizer", world=1)
def _():
    from torch.distributed.optim import ZeroRedundancyOptimizer

    class FusedAdamW(torch.optim.AdamW):  # a custom optimizer class, as in fused/third-party ones
        pass

    ZeroRedundancyOptimizer(
        nn.Linear(4, 4).parameters(), optimizer_class=FusedAdamW, overlap_with_ddp=True, lr=1e-4
    )


@repro("zero-missing-optimizer-class", world=1)
def _():
    from torch.distributed.optim import ZeroRedundancyOptimizer

    ZeroRedundancyOptimizer(  # `optim=` from an early example
        params=nn.Linear(4, 4).parameters(), optim=torch.optim.SGD, lr=0.1, momentum=0.9
    )


@repro("zero-bucket-view-ignored-with-overlap", world=1)
def _():
    from torch.distributed.optim import ZeroRedundancyOptimizer

    with _zero_log() as lines:
        ZeroRedundancyOptimizer(
            nn.Linear(4, 4).parameters(),
            optimizer_class=torch.optim.AdamW,
            overlap_with_ddp=True,
            parameters_as_bucket_view=True,
            lr=1e-4,
        )
    return "\n".join(lines)


@repro("zero-trainable-params-changed", world=1)
def _():
    from torch.distributed.optim import ZeroRedundancyOptimizer

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[0].requires_grad_(False)  # a frozen backbone
    optim = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    model[0].requires_grad_(True)  # unfrozen halfway through
    model(torch.randn(2, 4)).sum().backward()
    with _zero_log() as lines:
        optim.step()
    return "\n".join(lines)


@repro("join-multiple-process-groups", world=2, pg=False)
def _():
    from torch.distributed.algorithms.join import Join
    from torch.distributed.optim import ZeroRedundancyOptimizer

    with _two_ranks("join-multiple-process-groups"):
        dp_group = dist.new_group([0, 1])
        model = DDP(nn.Linear(4, 4), process_group=dp_group)
        optim = ZeroRedundancyOptimizer(  # no process_group: the default one
            model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3
        )
        with Join([model, optim]):
            pass


@repro("join-requires-a-joinable", pg=False)
def _():
    from torch.distributed.algorithms.join import Join

    with Join([]):
        pass


@repro("ddp-find-unused-but-none-unused", pg=False)
def _():
    return run_ranks(
        _PREAMBLE
        + """
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
model = DDP(nn.Linear(2, 2), find_unused_parameters=True)
model(torch.randn(2, 2)).sum().backward()
dist.destroy_process_group()
""",
        world=1,
    )


@repro("pg-gloo-timeout", pg=False)
def _():
    return run_ranks(
        _PREAMBLE
        + """
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=2))
if rank == 0:
    dist.all_reduce(torch.ones(1))   # rank 1 never joins
else:
    time.sleep(4)
"""
    )


@repro("pg-collective-mismatch", pg=False)
def _():
    return run_ranks(
        _PREAMBLE
        + """
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
t = torch.ones(2)
if rank == 0:
    dist.all_reduce(t)
else:
    dist.broadcast(t, src=0)
""",
        env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
    )


@repro("pg-connection-closed", pg=False)
def _():
    return run_ranks(
        _PREAMBLE
        + """
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
dist.barrier()
if rank == 1:
    os._exit(1)                      # a worker that crashes
time.sleep(1)
dist.all_reduce(torch.ones(1))
"""
    )


# --- NCCL: need a GPU (run by the GPU job; one GPU is enough) -----------------------------


@repro("nccl-duplicate-gpu", pg=False, device="cuda")
def _():
    # Two ranks that both end up on GPU 0 (the usual cause: set_device never called).
    return run_ranks(
        _PREAMBLE
        + """
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
dist.all_reduce(torch.ones(1, device="cuda"))
""",
        timeout=120,
    )


@repro("nccl-watchdog-timeout", pg=False, device="cuda")
def _():
    # A collective that cannot finish within the group timeout: the GPU is kept busy before it.
    return run_ranks(
        _PREAMBLE
        + """
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=2),
                        device_id=torch.device("cuda", 0))
torch.cuda._sleep(20_000_000_000)
dist.all_reduce(torch.ones(1, device="cuda"))
torch.cuda.synchronize()
""",
        world=1,
        timeout=120,
    )


@repro("nccl-destroy-not-called", pg=False, device="cuda")
def _():
    return run_ranks(
        _PREAMBLE
        + """
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
dist.all_reduce(torch.ones(1, device="cuda"))
torch.cuda.synchronize()
""",
        world=1,
        timeout=120,
    )


@repro("nccl-barrier-device-unknown", pg=False, device="cuda")
def _():
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    with captured_warnings() as w:
        dist.barrier()
    return "\n".join(w)
