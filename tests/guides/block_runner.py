"""Run guide code blocks on one rank of a torchrun job (see blocks.py for the markers).

Usage: torchrun --nproc-per-node N block_runner.py BLOCKS.json OUT_DIR
Each block runs in a fresh namespace holding the names every guide block may assume (os,
contextlib, torch, nn, F, dist) plus what its setup adds, on a gloo process group unless the
block creates its own. Writes OUT_DIR/rank<R>.json: {block id: error text, or "" when it passed},
after each block, and OUT_DIR/rank<R>.started before the first.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import os
import re
import sys
import traceback
import types
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.optim  # noqa: F401 - its import warns (torch.jit.script) in 2.13; not a block's doing
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from group_stores import own_group_store  # noqa: E402

TIMEOUT = datetime.timedelta(seconds=30)
BAD_WARNINGS = (FutureWarning, DeprecationWarning)


def _setups() -> dict:
    found = {}
    sys.path.insert(0, str(HERE / "setups"))
    for f in sorted((HERE / "setups").glob("*.py")):
        mod = importlib.import_module(f.stem)
        for name, obj in vars(mod).items():
            if (
                callable(obj)
                and not name.startswith("_")
                and getattr(obj, "__module__", "") == mod.__name__
            ):
                found[name] = obj
    return found


def cpu_text(code: str) -> str:
    """The declared CUDA -> CPU rewrite of adapt=cpu blocks."""
    code = code.replace('"cpu:gloo,cuda:nccl"', '"gloo"')
    code = re.sub(r"""(["'])nccl\1""", r"\1gloo\1", code)
    code = re.sub(r"""(["'])cuda(:\d+)?\1""", r"\1cpu\1", code)
    code = re.sub(r"device_ids=\[[^\]]*\]", "device_ids=None", code)
    code = re.sub(r"output_device=\w+", "output_device=None", code)
    return code


@contextlib.contextmanager
def cpu_patches():
    saved = (torch.cuda.set_device, torch.Tensor.cuda, nn.Module.cuda, torch.cuda.current_device)
    torch.cuda.set_device = lambda *a, **k: None
    torch.Tensor.cuda = lambda self, *a, **k: self
    nn.Module.cuda = lambda self, *a, **k: self
    torch.cuda.current_device = lambda: 0
    try:
        yield
    finally:
        torch.cuda.set_device, torch.Tensor.cuda, nn.Module.cuda, torch.cuda.current_device = saved


@contextlib.contextmanager
def as_main(module: types.ModuleType):
    """Make `module` the `__main__` module for the duration, then put the runner back."""
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = module
    try:
        yield
    finally:
        sys.modules["__main__"] = saved


def ensure_group(code: str) -> None:
    """A block that initialises its own group gets none; every other block gets a gloo one."""
    owns = "init_process_group(" in code
    if owns and dist.is_initialized():
        dist.destroy_process_group()
    if not owns and not dist.is_initialized():
        with own_group_store(TIMEOUT):
            dist.init_process_group("gloo", timeout=TIMEOUT)


def run_block(b: dict, setups: dict) -> str:
    code = cpu_text(b["code"]) if b["adapt"] == "cpu" else b["code"]
    ensure_group(code)
    # The block runs as a script's top level: its namespace is the `__main__` module while it
    # runs, so classes it defines pickle by name (torch.save, DCP) as they would in a user's file.
    main = types.ModuleType("__main__")
    ns = main.__dict__
    ns.update(os=os, contextlib=contextlib, torch=torch, nn=nn, F=F, dist=dist)
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with (
                cpu_patches() if b["adapt"] == "cpu" else contextlib.nullcontext(),
                own_group_store(TIMEOUT),
                as_main(main),
            ):
                if b["setup"]:
                    setups[b["setup"]](ns)
                exec(compile(code, b["id"], "exec"), ns)
        except BaseException as exc:  # noqa: BLE001 - CheckpointException is a BaseException
            if isinstance(exc, KeyboardInterrupt):
                raise
            text = f"{type(exc).__name__}: {exc}"
            if b["raises"]:
                return "" if b["raises"] in text else f"raised, but not {b['raises']!r}: {text}"
            return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
    if b["raises"]:
        return f"expected an error containing {b['raises']!r}; none was raised"
    if not b["legacy"]:
        bad = [w for w in caught if issubclass(w.category, BAD_WARNINGS)]
        if bad:
            return "; ".join(f"{w.category.__name__}: {w.message}" for w in bad)[:2000]
    return ""


def main() -> None:
    blocks = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    rank = int(os.environ.get("RANK", "0"))
    setups = _setups()
    results = {}
    # The rank came up: from here on, a block missing from its results is one that died.
    (out / f"rank{rank}.started").touch()
    for b in blocks:
        try:
            results[b["id"]] = run_block(b, setups)
        except BaseException as exc:  # noqa: BLE001 - a broken group must not stop the others
            results[b["id"]] = f"harness: {type(exc).__name__}: {exc}"
        # A failed block may leave its group broken, and a block's own group has its own
        # timeout: either way the next block starts on a fresh one from ensure_group.
        if (results[b["id"]] or "init_process_group(" in b["code"]) and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        # Replaced whole, never half-written, should the next block kill this rank (by hand, not
        # fsdp_skill.files: tests/gpu/run.sh runs this where only torch is installed).
        (out / f"rank{rank}.tmp").write_text(json.dumps(results))
        os.replace(out / f"rank{rank}.tmp", out / f"rank{rank}.json")
    sys.stdout.flush()
    os._exit(0)  # skip gloo's teardown, which can abort a finished process under load


if __name__ == "__main__":
    main()
