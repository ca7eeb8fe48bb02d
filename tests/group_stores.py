"""Several process groups, one after the other, inside one torchrun launch.

The runners that run many snippets, repros or examples in one launch (tests/guides/block_runner.py,
tests/errors/errors_harness.py, tests/examples/runs.py) create a new group for each. Re-creating a
group resets torch's group counter, so a second group on the launcher's store would read the
first one's keys and connect to dead peers (random refusals, hangs): each group after the first
gets a key prefix of its own on that store.

Only torch is needed: tests/gpu/run.sh runs these runners where pytest is not installed.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os

import torch.distributed as dist

_groups = itertools.count(1)
_started = [False]  # has an init_process_group() under own_group_store run in this process


def fresh_store(timeout: datetime.timedelta) -> dist.Store:
    """torchrun's store (from its variables) under a prefix no earlier group of this process used."""
    base = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        int(os.environ["WORLD_SIZE"]),
        is_master=False,
        timeout=timeout,
    )
    return dist.PrefixStore(f"group{next(_groups)}", base)


@contextlib.contextmanager
def own_group_store(timeout: datetime.timedelta):
    """Within the block, an init_process_group() that names no store or init_method gets a
    fresh_store() unless it is the first group of this process: code written for torchrun's
    variables runs unchanged, as many times as the runner needs."""
    real = dist.init_process_group

    def init(*args, **kwargs):
        if "store" not in kwargs and "init_method" not in kwargs and _started[0]:
            kwargs.update(
                store=fresh_store(kwargs.get("timeout") or timeout),
                rank=int(os.environ["RANK"]),
                world_size=int(os.environ["WORLD_SIZE"]),
            )
        _started[0] = True
        return real(*args, **kwargs)

    dist.init_process_group = init
    try:
        yield
    finally:
        dist.init_process_group = real
