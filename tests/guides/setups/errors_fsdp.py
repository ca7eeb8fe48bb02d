"""Setups for the code blocks of references/guides/errors/fsdp.md (see tests/guides/blocks.py)."""

from __future__ import annotations

import os
import tempfile

import torch
import torch.nn as nn


class _TokHead(nn.Module):
    """A tiny language-model shape: token embedding, output head, and an extra method."""

    def __init__(self, vocab: int = 16, dim: int = 4):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        return self.head(self.tok(ids))

    def embed(self, ids):
        return self.tok(ids)


def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))


def errors_fsdp_tok_head(ns: dict) -> None:
    """`model` with `tok` / `head` submodules and an `embed` method; `ids` a batch of tokens."""
    torch.manual_seed(0)
    ns["model"] = _TokHead()
    ns["ids"] = torch.tensor([[1, 2, 3], [4, 5, 6]])


def errors_fsdp_tied_tok_head(ns: dict) -> None:
    """Like `errors_fsdp_tok_head`, with the output head tied to the embedding."""
    errors_fsdp_tok_head(ns)
    ns["model"].head.weight = ns["model"].tok.weight


def errors_fsdp_mlp(ns: dict) -> None:
    """`model`: a 3-layer MLP on CPU; `x`: a (2, 4) input batch."""
    torch.manual_seed(0)
    ns["model"] = _mlp()
    ns["x"] = torch.randn(2, 4)


def errors_fsdp_full_state_dict(ns: dict) -> None:
    """`model`: an unsharded MLP; `full_sd`: a plain-tensor state dict of the same MLP."""
    errors_fsdp_mlp(ns)
    ns["full_sd"] = _mlp().state_dict()


def errors_fsdp_frozen_mlp(ns: dict) -> None:
    """`model`: an MLP whose first layer is frozen (weight and bias), as with a frozen backbone."""
    errors_fsdp_mlp(ns)
    ns["model"][0].requires_grad_(False)


def errors_fsdp_sharded_and_plain(ns: dict) -> None:
    """`model`: an MLP sharded by `fully_shard` over all ranks; `plain`: an unsharded MLP of the
    same shape (what a single-process loader builds); `path`: a file path to save to."""
    from torch.distributed.fsdp import fully_shard

    errors_fsdp_mlp(ns)
    fully_shard(ns["model"])
    ns["plain"] = _mlp()
    ns["path"] = os.path.join(tempfile.mkdtemp(prefix="errors_fsdp_"), "model.pt")


def errors_fsdp1_nested(ns: dict) -> None:
    """`model`: an FSDP1 root on CPU around an MLP whose first layer is its own FSDP instance;
    `FSDP`; `x`: a (2, 4) input batch."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    torch.manual_seed(0)
    mlp = _mlp()
    mlp[0] = FSDP(mlp[0], device_id=torch.device("cpu"))
    ns.update(model=FSDP(mlp, device_id=torch.device("cpu")), FSDP=FSDP, x=torch.randn(2, 4))
