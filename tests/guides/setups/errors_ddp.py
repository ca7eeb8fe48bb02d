"""Setups for the code blocks of references/guides/errors/ddp-and-process-groups.md and
references/guides/errors/launch-and-elastic.md (see tests/guides/blocks.py)."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


class _TwoHeads(nn.Module):
    """A body and two heads; `forward(x, use_b=True)` uses head `b`, otherwise head `a`."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.a = nn.Linear(4, 1)
        self.b = nn.Linear(4, 1)

    def forward(self, x, use_b=False):
        h = self.body(x)
        return self.b(h) if use_b else self.a(h)


def errors_ddp_two_heads(ns: dict) -> None:
    """`model`: a two-head module (head `b` only used when `use_b=True`); `x`: a (2, 4) batch;
    `DDP`: DistributedDataParallel."""
    torch.manual_seed(0)
    ns["model"] = _TwoHeads()
    ns["x"] = torch.randn(2, 4)
    ns["DDP"] = DistributedDataParallel


def errors_ddp_linear(ns: dict) -> None:
    """`model`: an `nn.Linear(4, 4)` on CPU; `x`: a (2, 4) batch; `DDP`: DistributedDataParallel."""
    torch.manual_seed(0)
    ns["model"] = nn.Linear(4, 4)
    ns["x"] = torch.randn(2, 4)
    ns["DDP"] = DistributedDataParallel


def errors_ddp_bn(ns: dict) -> None:
    """`model`: Linear + BatchNorm1d + Linear (a small discriminator); `real`, `fake`: (4, 4)
    batches; `DDP`: DistributedDataParallel."""
    torch.manual_seed(0)
    ns["model"] = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    ns["real"], ns["fake"] = torch.randn(4, 4), torch.randn(4, 4)
    ns["DDP"] = DistributedDataParallel


# Importing torch.distributed.optim makes torch 2.13 emit DeprecationWarnings from its own
# torch.jit.script calls; importing it when this module loads keeps them out of the blocks.
from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: E402


def errors_ddp_zero(ns: dict) -> None:
    """`model`: an `nn.Linear(4, 4)`; `opt`: a `ZeroRedundancyOptimizer` (SGD) over it that has
    taken one step; `ZeroRedundancyOptimizer` and `DDP` are in scope."""
    errors_ddp_linear(ns)
    opt = ZeroRedundancyOptimizer(ns["model"].parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
    ns["model"](ns["x"]).sum().backward()
    opt.step()
    ns["opt"] = opt
    ns["ZeroRedundancyOptimizer"] = ZeroRedundancyOptimizer
