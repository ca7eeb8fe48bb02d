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


def run_world(blocks: list, world: int) -> dict[str, list[str]]:
    """Run blocks on `world` gloo ranks; {block id: [error per rank]} ('' = passed)."""
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
        results: dict[str, list[str]] = {b.id: [] for b in blocks}
        for rank in range(world):
            f = Path(tmp) / f"rank{rank}.json"
            got = json.loads(f.read_text()) if f.exists() else {}
            for b in blocks:
                results[b.id].append(
                    got.get(b.id, f"rank {rank} never finished this block: {err[-1500:]}")
                )
        return results


def owns_group(block) -> bool:
    return "init_process_group(" in block.code


@pytest.fixture(scope="module")
def cpu_results(request):
    # Only the blocks whose tests were selected (`-k checkpointing` runs that guide's blocks).
    selected = {
        item.callspec.id
        for item in request.session.items
        if item.originalname == "test_block_runs" and hasattr(item, "callspec")
    }
    todo = [b for b in CPU if b.id in selected]
    out = {}
    for world in sorted({b.world for b in todo}):
        out.update(run_world([b for b in todo if b.world == world and not owns_group(b)], world))
    # A block that creates its own group gets a launch of its own: a second group on the
    # launcher's store would find the first one's keys.
    for b in todo:
        if owns_group(b):
            out.update(run_world([b], b.world))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("block", CPU, ids=lambda b: b.id)
def test_block_runs(block, cpu_results):
    errors = [e for e in cpu_results[block.id] if e]
    assert not errors, f"{block.id} failed:\n{errors[0]}"


def test_failing_block_fails(tmp_path):
    # A block that raises, or warns FutureWarning, must be reported as failing.
    page = tmp_path / "g.md"
    page.write_text(
        "<!-- run: world=1 -->\n```python\nraise RuntimeError('boom')\n```\n\n"
        "<!-- run: world=1 -->\n```python\nimport warnings\nwarnings.warn('old', FutureWarning)\n```\n\n"
        "<!-- run: world=1 raises=boom -->\n```python\nraise RuntimeError('boom')\n```\n"
    )
    found = blocks_mod.parse_file(page)
    for b in found:
        b.path = blocks_mod.ROOT / "t" / b.path.name
    res = run_world(found, 1)
    assert [bool(v[0]) for v in res.values()] == [True, True, False], res
