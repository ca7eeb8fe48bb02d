"""Every python block in SKILL.md and the guides runs, or says why it cannot (see blocks.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import blocks as blocks_mod
import pytest

HERE = Path(__file__).resolve().parent
ALL = blocks_mod.all_blocks()
CPU = [b for b in ALL if b.mode == "run" and not b.cuda]
LAUNCH_TIMEOUT_S = 300


def _setup_names() -> set[str]:
    sys.path.insert(0, str(HERE))
    import block_runner

    return set(block_runner._setups())


def test_every_block_is_marked():
    unmarked = [b.id for b in ALL if not b.mode]
    assert not unmarked, (
        "python blocks with no run/norun marker (see tests/guides/blocks.py):\n"
        + "\n".join(unmarked)
    )


def test_setups_exist():
    names = _setup_names()
    missing = sorted({f"{b.id}: {b.setup}" for b in ALL if b.setup and b.setup not in names})
    assert not missing, f"unknown setups: {missing}"


def test_unmarked_block_is_reported(tmp_path):
    # The check above must be able to fail.
    page = tmp_path / "g.md"
    page.write_text(
        "# t\n\n```python\nprint(1)\n```\n\n<!-- run: world=2 -->\n```python\nprint(2)\n```\n"
    )
    found = blocks_mod.parse_file(page)
    assert [b.mode for b in found] == ["", "run"] and found[1].world == 2


def kill_tree(proc: subprocess.Popen, marker: str) -> None:
    """Kill the launch and every process whose command line names `marker` (its temp dir):
    torchrun's workers do not all stay in the launcher's process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(int(pid), signal.SIGKILL)


def _launch(blocks: list, world: int) -> tuple[list[dict[str, str] | None], str]:
    """One torchrun job over `blocks`: (each rank's {block id: error}, or None for a rank whose
    runner never came up; the launch's stderr)."""
    payload = [
        {
            "id": b.id,
            "code": b.code,
            "setup": b.setup,
            "adapt": b.adapt,
            "raises": b.raises,
            "legacy": "legacy" in b.flags,
        }
        for b in blocks
    ]
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "blocks.json"
        spec.write_text(json.dumps(payload))
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        for k in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
            "TORCH_DISTRIBUTED_DEBUG",
        ):
            env.pop(k, None)
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={world}",
            str(HERE / "block_runner.py"),
            str(spec),
            tmp,
        ]
        log = Path(tmp) / "stderr.txt"
        with open(log, "w") as err_f:
            # No pipes: a worker that outlives the launcher must not keep the test waiting on one.
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=err_f,
                env=env,
                cwd=blocks_mod.ROOT,
                start_new_session=True,
            )
            try:
                proc.wait(timeout=LAUNCH_TIMEOUT_S)
                note = ""
            except subprocess.TimeoutExpired:
                kill_tree(proc, tmp)
                proc.wait()
                note = f"killed after {LAUNCH_TIMEOUT_S}s\n"
        err = note + log.read_text(errors="replace")
        per_rank = []
        for rank in range(world):
            f = Path(tmp) / f"rank{rank}.json"
            if not (Path(tmp) / f"rank{rank}.started").exists():
                per_rank.append(None)
            else:
                per_rank.append(json.loads(f.read_text()) if f.exists() else {})
        return per_rank, err


def run_world(blocks: list, world: int) -> dict[str, list[str]]:
    """Run blocks on `world` gloo ranks, in this order; {block id: [error per rank]} ('' = passed).

    A block that kills or hangs its launch fails; the blocks after it never got a fair run, so
    they go again in a launch of their own and only the block that broke the launch fails.
    """
    per_rank, err = _launch(blocks, world)
    results: dict[str, list[str]] = {
        b.id: [
            (got or {}).get(b.id, f"rank {rank} never finished this block: {err[-1500:]}")
            for rank, got in enumerate(per_rank)
        ]
        for b in blocks
    }
    if None in per_rank:  # the runner itself is broken: another launch would fail the same way
        return results
    broke = next(
        (i for i, b in enumerate(blocks) if any(b.id not in got for got in per_rank)), None
    )
    if broke is not None and broke + 1 < len(blocks):
        results.update(run_world(blocks[broke + 1 :], world))
    return results


def owns_group(block) -> bool:
    return "init_process_group(" in block.code


def launch_plan(blocks: list) -> list[list]:
    """The launches that run blocks of one world size, each list in its running order.

    The ordinary blocks run first, on the group the runner creates from the launcher's store;
    then the blocks that create their own group, which the runner points at a fresh key prefix
    of that store (block_runner.own_group_store). A block that passes its own init_method gets
    no prefix: pointed at the launcher's address it meets its peers under torch's default keys,
    which an earlier group on that store has already written, so on more than one rank it leads
    a launch (a lone rank has no peers to mistake).
    """
    ordinary = [b for b in blocks if not owns_group(b)]
    owners = [b for b in blocks if owns_group(b)]
    leaders = [b for b in owners if b.world > 1 and "init_method=" in b.code]
    rest = ordinary + [b for b in owners if b not in leaders]
    plan = [[leaders[0], *rest]] if leaders else [rest]
    return plan + [[b] for b in leaders[1:]]


def run_blocks(blocks: list) -> dict[str, list[str]]:
    """{block id: [error per rank]} for blocks of any world sizes, one launch per size."""
    out = {}
    for world in sorted({b.world for b in blocks}):
        for launch in launch_plan([b for b in blocks if b.world == world]):
            if launch:
                out.update(run_world(launch, world))
    return out


# A block that raises, warns FutureWarning or fails in a group of its own must be reported as
# failing, and only that block: the ones sharing its launch still pass (test_failing_block_fails).
FAILING = [
    ("", "raise RuntimeError('boom')"),
    ("", "import warnings\nwarnings.warn('old', FutureWarning)"),
    ("raises=boom", "raise RuntimeError('boom')"),
    ("", "dist.init_process_group('gloo')\nraise RuntimeError('own')"),
    ("", "dist.init_process_group('gloo')\ndist.all_reduce(torch.ones(1))"),
    ("", "dist.all_reduce(torch.ones(1))"),
]


@pytest.fixture(scope="module")
def failing_blocks(tmp_path_factory):
    page = tmp_path_factory.mktemp("failing") / "g.md"
    page.write_text(
        "".join(
            f"<!-- run: world=1 {opts} -->\n```python\n{code}\n```\n\n" for opts, code in FAILING
        )
    )
    found = blocks_mod.parse_file(page)
    for b in found:
        b.path = blocks_mod.ROOT / "t" / b.path.name
    return found


@pytest.fixture(scope="module")
def cpu_results(request):
    # Only the blocks whose tests were selected (`-k checkpointing` runs that guide's blocks).
    selected = {
        item.callspec.id
        for item in request.session.items
        if item.originalname == "test_block_runs" and hasattr(item, "callspec")
    }
    blocks = [b for b in CPU if b.id in selected]
    # The made-up failing blocks share the one-rank launch: a launch of their own would
    # cost a torchrun agent and a rank, two torch imports.
    if any(item.originalname == "test_failing_block_fails" for item in request.session.items):
        blocks += request.getfixturevalue("failing_blocks")
    return run_blocks(blocks)


@pytest.mark.slow
@pytest.mark.parametrize("block", CPU, ids=lambda b: b.id)
def test_block_runs(block, cpu_results):
    errors = [e for e in cpu_results[block.id] if e]
    assert not errors, f"{block.id} failed:\n{errors[0]}"


def test_failing_block_fails(failing_blocks, cpu_results):
    failed = {b.line for b in failing_blocks if any(cpu_results[b.id])}
    assert failed == {failing_blocks[i].line for i in (0, 1, 3)}, {
        b.id: cpu_results[b.id] for b in failing_blocks
    }


def test_blocks_after_a_dead_rank_run_again(monkeypatch):
    # Rank 1 died in b: b fails, c goes again in a launch of its own and passes there.
    launches = []

    def fake_launch(blocks, world):
        ids = [b.id for b in blocks]
        launches.append(ids)
        if len(launches) == 1:
            return [{"a": "", "b": "", "c": ""}, {"a": ""}], "rank 1 exited with code 3"
        return [dict.fromkeys(ids, "")] * world, ""

    monkeypatch.setattr(sys.modules[__name__], "_launch", fake_launch)
    blocks = [SimpleNamespace(id=i) for i in "abc"]
    res = run_world(blocks, 2)
    assert launches == [["a", "b", "c"], ["c"]]
    assert res["a"] == ["", ""] and res["c"] == ["", ""]
    assert res["b"][0] == "" and "never finished" in res["b"][1] and "code 3" in res["b"][1]
    # A runner that never came up would fail the same way again: no second launch.
    launches.clear()

    def no_runner(blocks, world):
        launches.append([b.id for b in blocks])
        return [{}, None], "no python"

    monkeypatch.setattr(sys.modules[__name__], "_launch", no_runner)
    res = run_world(blocks, 2)
    assert launches == [["a", "b", "c"]]
    assert all("never finished" in res[i][1] for i in "abc")
