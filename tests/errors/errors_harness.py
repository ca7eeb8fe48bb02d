"""Reproduce catalogued error messages on the installed torch.

A `repro_<area>.py` module next to this file registers one function per catalog entry:

    @repro("ddp-unused-parameters", world=2)
    def _():
        ...  # code that makes torch raise the entry's message

The function either raises (the exception is captured as "Type: message" plus its traceback)
or returns a string (for messages torch logs or warns instead of raising; capture them with
`captured_warnings()` or a subprocess). `world` is the number of ranks (torchrun, gloo, CPU);
`pg=False` runs it with no process group; `device="cuda"` marks a repro that needs a GPU.

Run as `python errors_harness.py MODULE[,MODULE...] OUT_DIR [--world N] [--device cpu|cuda]
[--ids ID,...]`, directly for one rank or under torchrun for several: each rank writes
OUT_DIR/rank<R>.json with {id: {"text": ..., "traceback": ...}}, rewritten after every repro,
so one that kills its process takes only itself and the repros after it. Every repro runs on
a fresh process group, so one that leaves a group broken cannot spoil the next.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass

REPROS: dict[str, Repro] = {}

# A repro that leaves peers waiting fails in this time instead of the 30-minute default.
PG_TIMEOUT_S = 20


@dataclass
class Repro:
    id: str
    fn: Callable[[], object]
    world: int
    pg: bool
    device: str
    module: str


def repro(entry_id: str, *, world: int = 1, pg: bool = True, device: str = "cpu"):
    """Register `fn` as the reproduction of catalog entry `entry_id`."""

    def register(fn: Callable[[], object]) -> Callable[[], object]:
        if entry_id in REPROS:
            raise ValueError(f"two repros for {entry_id}")
        REPROS[entry_id] = Repro(entry_id, fn, world, pg, device, fn.__module__)
        return fn

    return register


@contextlib.contextmanager
def captured_warnings():
    """Collect warnings raised inside the block: `with captured_warnings() as w: ...; w[0]`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        texts: list[str] = []
        yield texts
    texts.extend(f"{w.category.__name__}: {w.message}" for w in caught)


def load_all(folder: str | None = None) -> dict[str, Repro]:
    """Import every repro_*.py module of the folder; returns the registry."""
    folder = folder or os.path.dirname(os.path.abspath(__file__))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    for name in sorted(os.listdir(folder)):
        if name.startswith("repro_") and name.endswith(".py"):
            importlib.import_module(name[:-3])
    return REPROS


def _init_group(world: int) -> None:
    import torch.distributed as dist

    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from group_stores import fresh_store  # each repro on a group of its own

    timeout = datetime.timedelta(seconds=PG_TIMEOUT_S)
    if world == 1 and "TORCHELASTIC_RUN_ID" not in os.environ:
        dist.init_process_group(
            "gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timeout
        )
    else:
        dist.init_process_group(
            "gloo",
            store=fresh_store(timeout),
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            timeout=timeout,
        )


def _reset() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)


def run_one(r: Repro) -> dict:
    _reset()
    if r.pg:
        _init_group(r.world)
    try:
        out = r.fn()
        text = "" if out is None else str(out)
        tb = text
        if not text:
            text = "(no error raised)"
    except BaseException as exc:  # noqa: BLE001 - CheckpointException is a BaseException
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = f"{type(exc).__name__}: {exc}"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    finally:
        _reset()
    return {"text": text, "traceback": tb}


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("module", help="one repro module, or several separated by commas")
    p.add_argument("out_dir")
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--ids", help="only these repros (comma-separated), in registration order")
    args = p.parse_args(argv)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    modules = args.module.split(",")
    for module in modules:
        importlib.import_module(module)
    # Run as a script this file is __main__; the repro modules registered in `errors_harness`.
    registry = importlib.import_module("errors_harness").REPROS
    rank = int(os.environ.get("RANK", "0"))
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"rank{rank}.json")
    results: dict[str, dict] = {}

    def save() -> None:
        # Replaced whole, never half-written, should the next repro kill this process. Not
        # fsdp_skill.files.write_text: this runner must work where only torch is installed
        # (tests/gpu/run.sh on a GPU machine).
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(results, f)
        os.replace(path + ".tmp", path)

    save()
    for r in registry.values():
        if (
            r.module in modules
            and r.world == args.world
            and r.device == args.device
            and (not args.ids or r.id in args.ids.split(","))
        ):
            results[r.id] = run_one(r)
            save()
    sys.stdout.flush()
    # gloo's teardown can abort a finished process under load; the results are written.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
