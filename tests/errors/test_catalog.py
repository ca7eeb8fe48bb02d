"""The error catalog stays exact: every message it quotes is what the installed torch prints.

Each entry marked `repro: cpu` has a reproduction in `repro_<area>.py`; all of them run here on
gloo at the world size they need, and the entry's message must match what torch raised. The
traceback each reproduction produced is then pasted into the search as a user would, and the
entry must come first.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import catalog
import errors_harness
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ENTRIES = catalog.load()
BY_ID = {e.id: e for e in ENTRIES}
REPROS = errors_harness.load_all(str(HERE))
LAUNCH_TIMEOUT_S = 240
MIN_ENTRIES = 80


def test_catalog_size_and_ids():
    ids = [e.id for e in ENTRIES]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, f"duplicate ids: {dupes}"
    assert len(ENTRIES) >= MIN_ENTRIES, f"{len(ENTRIES)} entries, want at least {MIN_ENTRIES}"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_entry_is_complete(entry):
    assert entry.repro in ("cpu", "cuda", "none"), f"{entry.where}: repro must be cpu, cuda or none"
    if entry.repro == "none":
        assert entry.why, f"{entry.where}: `repro: none` needs the reason after a colon"
    assert entry.message.strip(), f"{entry.where}: no ```text block with the message"
    assert entry.objects, f"{entry.where}: no objects comment"
    for part in ("**Cause", "**Fix"):
        assert part in entry.body, f"{entry.where}: lacks a {part}...** paragraph"
    assert re.search(r"^Sources?: .*https?://", entry.body, re.M), (
        f"{entry.where}: no `Source: URL` line"
    )


def test_every_cpu_entry_has_a_repro_and_back():
    cpu = {e.id for e in ENTRIES if e.repro == "cpu"}
    cuda = {e.id for e in ENTRIES if e.repro == "cuda"}
    missing = sorted(cpu - REPROS.keys())
    orphans = sorted(REPROS.keys() - cpu - cuda)
    assert not missing, f"entries marked `repro: cpu` without a repro: {missing}"
    assert not orphans, f"repros for no cpu/cuda entry: {orphans}"
    wrong = sorted(i for i in cuda & REPROS.keys() if REPROS[i].device != "cuda")
    assert not wrong, f"cuda entries whose repro is not device='cuda': {wrong}"


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    for k in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCH_DISTRIBUTED_DEBUG",
    ):
        env.pop(k, None)
    return env


def start_group(
    module: str, world: int, device: str, out: Path, ids: list[str] | None = None
) -> subprocess.Popen:
    harness = str(HERE / "errors_harness.py")
    args = [module, str(out), "--world", str(world), "--device", device]
    if ids:
        args += ["--ids", ",".join(ids)]
    if world == 1:
        cmd = [sys.executable, harness, *args]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={world}",
            harness,
            *args,
        ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=HERE,
        start_new_session=True,
    )


def collect_group(proc: subprocess.Popen, world: int, out: Path, deadline: float) -> dict:
    """{id: [per-rank result]} of one launch, killing it past the deadline."""
    import time

    try:
        _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    merged: dict[str, list[dict]] = defaultdict(list)
    for rank in range(world):
        f = out / f"rank{rank}.json"
        if f.exists():
            for k, v in json.loads(f.read_text()).items():
                merged[k].append(v)
    if not merged or proc.returncode:
        merged["__launch__"].append(
            {"text": f"exit {proc.returncode}: {err[-2000:]}", "traceback": ""}
        )
    return merged


def run_group(module: str, world: int, device: str, out: Path) -> dict:
    import time

    proc = start_group(module, world, device, out)
    return collect_group(proc, world, out, time.monotonic() + LAUNCH_TIMEOUT_S)


def launch_groups(device: str = "cpu") -> list[tuple[str, int]]:
    """(modules, world) per launch: the repros of one world size share a launch, each on a
    fresh group (tests/group_stores.py). A process costs a torch import (several
    CPU-seconds); the one-rank repros are busy, not waiting (their subprocesses import torch
    too), so processes of their own per module would not finish sooner on a 2-core box."""
    repros = [r for r in REPROS.values() if r.device == device]
    return [
        (",".join(sorted({r.module for r in repros if r.world == world})), world)
        for world in sorted({r.world for r in repros})
    ]


def _ids(modules: str, world: int, device: str) -> list[str]:
    """The repros a launch runs, in the harness's order (registration order)."""
    names = modules.split(",")
    return [
        r.id
        for r in REPROS.values()
        if r.module in names and r.world == world and r.device == device
    ]


def not_fairly_run(got: dict, ids: list[str], world: int, out: Path) -> list[str]:
    """The repros after the first one that some rank never finished (it killed or hung the
    launch): they never got a fair run. None when the harness itself never came up."""
    if not all((out / f"rank{rank}.json").exists() for rank in range(world)):
        return []
    broke = next((i for i, rid in enumerate(ids) if len(got.get(rid, [])) < world), None)
    return [] if broke is None else ids[broke + 1 :]


def run_all(device: str = "cpu") -> dict:
    """All repros of a device kind. The launches (one per world size) run at once: the
    several-rank repros spend much of their time waiting on the timeouts they provoke and on
    torchrun's start-up. The repros that a broken launch cut off run again, so only the one
    that broke it fails."""
    import time

    pending = [
        (modules, world, _ids(modules, world, device)) for modules, world in launch_groups(device)
    ]
    results: dict[str, list[dict]] = {"__launch__": []}
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        while pending:
            deadline = time.monotonic() + LAUNCH_TIMEOUT_S
            launched = []
            for modules, world, ids in pending:
                out = Path(tmp) / str(n)
                n += 1
                proc = start_group(modules, world, device, out, ids)
                launched.append((proc, modules, world, ids, out))
            pending = []
            for proc, modules, world, ids, out in launched:
                got = collect_group(proc, world, out, deadline)
                results["__launch__"] += got.pop("__launch__", [])
                results.update(got)
                rest = not_fairly_run(got, ids, world, out)
                if rest:
                    pending.append((modules, world, rest))
    return results


@pytest.fixture(scope="module")
def printed():
    return run_all("cpu")


CPU_ENTRIES = [e for e in ENTRIES if e.repro == "cpu"]


@pytest.mark.slow
@pytest.mark.parametrize("entry", CPU_ENTRIES, ids=lambda e: e.id)
def test_message_matches_torch(entry, printed):
    got = printed.get(entry.id)
    assert got, f"{entry.where}: the repro produced no result ({printed.get('__launch__')})"
    texts = [r["text"] for r in got]
    assert any(catalog.matches(entry.message, t) for t in texts), (
        f"{entry.where}: torch {__import__('torch').__version__} printed\n"
        + "\n---\n".join(t[:1500] for t in texts)
        + f"\nbut the catalog says\n{entry.message}"
    )


def test_repros_cut_off_by_a_broken_launch_run_again(tmp_path):
    # b killed rank 1: c never ran there, so it goes again; a finished everywhere and stays.
    (tmp_path / "rank0.json").write_text("{}")
    (tmp_path / "rank1.json").write_text("{}")
    got = {"a": [{}, {}], "b": [{}], "c": [{}]}
    assert not_fairly_run(got, ["a", "b", "c"], 2, tmp_path) == ["c"]
    assert not_fairly_run({**got, "b": [{}, {}], "c": [{}, {}]}, ["a", "b", "c"], 2, tmp_path) == []
    # A harness that never came up on a rank would fail the same way again.
    (tmp_path / "rank1.json").unlink()
    assert not_fairly_run(got, ["a", "b", "c"], 2, tmp_path) == []


def test_matcher_rejects_a_changed_message():
    # The check above must be able to fail: a reworded message no longer matches.
    msg = "RuntimeError: Expected to have finished reduction in the prior iteration <...> new one."
    printed = "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one."
    assert catalog.matches(msg, printed)
    assert not catalog.matches(msg.replace("finished", "completed"), printed)
    assert not catalog.matches("", printed)


@pytest.fixture(scope="module")
def index(built_data):
    os.environ["FSDP_SKILL_DATA_DIR"] = str(built_data)
    from fsdp_skill.search.engine import open_fresh

    idx = open_fresh(ROOT)
    yield idx
    idx.close()


def _rank_of(index, entry, query: str) -> int | None:
    from fsdp_skill.search.engine import search

    for r in search(index, query, k=10):
        if (
            r["url"].split("#")[0].endswith(str(entry.path.relative_to(ROOT)))
            and r["title"] == entry.heading
        ):
            return r["rank"]
    return None


def _first_printed(printed: dict, entry) -> dict | None:
    """The first rank's result whose text carries the entry's message, if any."""
    got = [r for r in printed.get(entry.id, []) if catalog.matches(entry.message, r["text"])]
    return got[0] if got else None


def _check_mostly_first(ranks: dict[str, int | None], min_entries: int) -> None:
    """At least 90% of the pasted tracebacks find their entry first, and all in the top 3."""
    first = [i for i, r in ranks.items() if r == 1]
    misses = {i: r for i, r in ranks.items() if r != 1}
    assert len(ranks) >= min_entries and len(first) / len(ranks) >= 0.9, (
        f"top-1 for {len(first)}/{len(ranks)}; others: {misses}"
    )
    assert all(r is not None and r <= 3 for r in ranks.values()), f"not in the top 3: {misses}"


@pytest.mark.slow
def test_pasted_tracebacks_find_their_entry(printed, index):
    """Each reproduced traceback, pasted whole, finds its catalog entry first."""
    ranks = {}
    for entry in CPU_ENTRIES:
        got = _first_printed(printed, entry)
        if got:
            ranks[entry.id] = _rank_of(index, entry, got["traceback"] or got["text"])
    _check_mostly_first(ranks, min_entries=1)


CRASH_LINE = "ValueError: bad batch\n"  # the worker's exception in repro_launch's crashing job


def _as_torchrun_prints(traceback: str, launch: str) -> str:
    """`traceback` as a 2-rank torchrun job prints it when both ranks raise it.

    `launch` is what torchrun printed for a job whose worker raised (the launch-child-failed
    repro, on the installed torch): its worker traceback is swapped for this one, with the
    `[rankN]: ` prefix that init_process_group's excepthook puts before every line
    (torch/distributed/distributed_c10d.py, `_distributed_excepthook`). Its start-up banner,
    the agent's log lines and torchrun's own traceback and failure table stay around it.
    """
    start = launch.index("Traceback (most recent call last)")
    end = launch.index(CRASH_LINE, start) + len(CRASH_LINE)
    body = "".join(f"[rank{r}]: {ln}\n" for r in (1, 0) for ln in traceback.strip().splitlines())
    return launch[:start] + body + launch[end:]


@pytest.mark.slow
def test_tracebacks_as_torchrun_prints_them_find_their_entry(printed, index):
    """A worker's traceback pasted with torchrun's prefixes, banner and report, the way a user
    copies a failed job's output, finds its entry first as well."""
    launch = printed["launch-child-failed"][0]["text"]
    assert CRASH_LINE in launch, launch[-2000:]
    ranks = {}
    for entry in CPU_ENTRIES:
        got = _first_printed(printed, entry)
        # Only exceptions a worker raises; the launcher's own messages are in `launch` already.
        if (
            got
            and got["traceback"]
            and "torch/distributed/run.py" not in got["traceback"]
            and not catalog.matches(entry.message, launch)
        ):
            ranks[entry.id] = _rank_of(index, entry, _as_torchrun_prints(got["traceback"], launch))
    _check_mostly_first(ranks, min_entries=100)
