"""Helpers for the example-script tests: launch torchrun jobs that can never hang CI,
and the single-process references the distributed runs are compared with.

A uniquely named module (not conftest) so that importing it can never clash
with another conftest.py on sys.path."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
PROBE = Path(__file__).resolve().parent / "probe.py"
RUNS = Path(__file__).resolve().parent / "runs.py"

# Collective timeout passed to every script: a stuck peer fails the run
# quickly instead of waiting out the 30-minute default.
SCRIPT_TIMEOUT_S = 60
# Wall-clock cap for a whole launch; the process group is killed past it.
LAUNCH_TIMEOUT_S = 180

HAS_CUDA = torch.cuda.is_available()
CUDA_GPUS = torch.cuda.device_count() if HAS_CUDA else 0


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    probe_records: list = field(default_factory=list)

    @property
    def summary(self) -> dict:
        """The final one-line JSON record the example prints on rank 0."""
        for line in reversed(self.stdout.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if "script" in rec:
                    return rec
        raise AssertionError(
            f"no JSON summary in output:\n{self.stdout[-3000:]}\n{self.stderr[-3000:]}"
        )

    @property
    def probes(self) -> list[dict]:
        """probe.py's per-rank records, ordered by rank (see run_probe)."""
        assert self.probe_records, (
            f"no probe records:\n{self.stdout[-3000:]}\n{self.stderr[-3000:]}"
        )
        return self.probe_records

    def check(self) -> Result:
        assert self.returncode == 0, (
            f"exit {self.returncode}\n{self.stdout[-3000:]}\n{self.stderr[-5000:]}"
        )
        return self


# What torchrun sets for its workers; a launch from a test must not inherit any of it.
LAUNCH_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "GROUP_RANK",
    "LOCAL_WORLD_SIZE",
)


def example_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    # One thread per rank: 2 ranks on a 2-core CI box must not oversubscribe.
    env.update(
        OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1"
    )
    for k in LAUNCH_VARS:
        env.pop(k, None)
    if extra:
        env.update(extra)
    return env


def _communicate(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # torchrun's workers live in its session: kill the whole group.
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"launch exceeded {timeout}s and was killed\n{out[-3000:]}\n{err[-3000:]}")


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def finish(proc: subprocess.Popen, timeout: float = LAUNCH_TIMEOUT_S) -> Result:
    out, err = _communicate(proc, timeout)
    return Result(proc.returncode, out, err)


def start(cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=example_env(env),
        cwd=cwd or ROOT,
        start_new_session=True,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_cmd(
    script: str, nproc: int, args: list[str], torchrun_args: list[str] | None = None
) -> list[str]:
    """`torchrun ... scripts/<script> ARGS` (`script` may also be an absolute path)."""
    rdzv = torchrun_args if torchrun_args is not None else ["--standalone"]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *rdzv,
        f"--nproc-per-node={nproc}",
        str(SCRIPTS / script),
        *args,
    ]


def run_probe(
    script: str,
    nproc: int = 2,
    args: list[str] = (),
    *,
    device: str = "cpu",
    env: dict | None = None,
    timeout: float = LAUNCH_TIMEOUT_S,
) -> Result:
    """Like run_torchrun, with probe.py's instruments around the example (see probe.py)."""
    cmd = torchrun_cmd(str(PROBE), nproc, [Path(script).stem, *script_args(list(args), device)])
    with tempfile.TemporaryDirectory() as out:
        res = finish(start(cmd, {**(env or {}), "PROBE_OUT": out}), timeout)
        records = [json.loads(f.read_text()) for f in Path(out).glob("rank*.json")]
    res.probe_records = sorted(records, key=lambda r: r["rank"])
    return res


@dataclass
class Run:
    """One entry of a run_many launch: an example (scripts/<script>, or the path of a copy)
    with its flags, extra environment variables, and probe.py's instruments."""

    script: str
    args: list[str]
    env: dict = field(default_factory=dict)
    probe: bool = False


def run_many(
    runs: list[Run], nproc: int = 2, *, device: str = "cpu", flags: list[str] | None = None
) -> list[Result]:
    """Run each entry as its own torchrun launch would, all in one launch (runs.py): one torch
    import per rank for all of them instead of one per rank and run, plus the agent's.
    `flags` go before each run's own (default: script_args's device and timeout).

    Results come in the order of `runs`, each with what the ranks printed and, for probed
    runs, their probe records. A run that ended the launch (an error, a non-zero exit: some
    runs are meant to fail) gets the launch's exit status and stderr; it took only itself,
    for the runs after it go again in a launch of their own."""
    if not runs:  # none selected (`-k`): a launch of nothing would still cost torch imports
        return []
    spec = [
        {
            "script": str(r.script) if Path(r.script).is_absolute() else Path(r.script).stem,
            "args": (script_args([], device) if flags is None else flags) + list(r.args),
            "env": r.env,
            "probe": r.probe,
        }
        for r in runs
    ]
    with tempfile.TemporaryDirectory() as out:
        (Path(out) / "runs.json").write_text(json.dumps(spec))
        cmd = torchrun_cmd(str(RUNS), nproc, [str(Path(out) / "runs.json"), out])
        launch = finish(start(cmd), LAUNCH_TIMEOUT_S * len(runs))
        came_up = all((Path(out) / f"started.rank{rank}").exists() for rank in range(nproc))
        results = []
        for i, run in enumerate(runs):
            # All ranks' output, as the launch's own stdout would carry it.
            outs = [Path(out) / f"run{i}.rank{rank}.out" for rank in range(nproc)]
            printed = "".join(f.read_text() for f in outs if f.exists())
            done = [Path(out) / f"run{i}.rank{rank}.json" for rank in range(nproc)]
            if not all(f.exists() for f in done):
                # The run that ended the launch: its exit status and errors are the launch's.
                results.append(Result(launch.returncode or 1, printed, launch.stderr))
                break
            res = Result(0, printed, launch.stderr)
            if run.probe:
                res.probe_records = [json.loads(f.read_text())["probe"] for f in done]
            results.append(res)
    rest = runs[len(results) :]
    if rest and not came_up:  # runs.py itself is broken: another launch would fail the same way
        return results + [Result(launch.returncode or 1, "", launch.stderr)] * len(rest)
    if rest:  # the runs after the one that died never got a fair run
        results += run_many(rest, nproc, device=device, flags=flags)
    return results


def selected_tests(request) -> set[str]:
    """The names ("test_x[param]") of this module's items the session runs (`-k` selects
    fewer), for a module fixture that launches the runs of several tests at once."""
    module = request.module.__name__
    return {item.name for item in request.session.items if item.module.__name__ == module}


def hidden_numpy_env(folder: Path) -> dict:
    """Environment in which `import numpy` fails as if it were not installed."""
    stub = folder / "numpy"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'numpy\' (hidden by the test)", name="numpy")\n'
    )
    return {"PYTHONPATH": str(folder)}


def compiled(s: dict) -> bool:
    """fsdp2_compile's summary: graphs were compiled in step 0 and none after (no recompiles)."""
    g = s["compiled_graphs"]
    return g[0] > 0 and len(set(g)) == 1


def tolerance(device: str) -> dict:
    """Loss tolerance against the CPU reference: cuBLAS and the fused attention kernels
    round differently from the CPU ones, so CUDA gets 1e-4 (same-device parity inside
    the run, --check-parity, stays at 1e-5)."""
    return dict(rel=1e-5, abs=1e-5) if device == "cpu" else dict(rel=1e-4, abs=1e-4)


def script_args(args: list[str], device: str) -> list[str]:
    return ["--device", device, "--timeout-s", str(SCRIPT_TIMEOUT_S), *args]


def run_torchrun(
    script: str,
    nproc: int = 2,
    args: list[str] = (),
    *,
    device: str = "cpu",
    torchrun_args: list[str] | None = None,
    env: dict | None = None,
    timeout: float = LAUNCH_TIMEOUT_S,
) -> Result:
    return finish(
        start(torchrun_cmd(script, nproc, script_args(list(args), device), torchrun_args), env),
        timeout,
    )


def run_python(
    script: str,
    args: list[str] = (),
    *,
    device: str = "cpu",
    env: dict | None = None,
    timeout: float = LAUNCH_TIMEOUT_S,
) -> Result:
    return finish(
        start([sys.executable, str(SCRIPTS / script), *script_args(list(args), device)], env),
        timeout,
    )


def run_in_process(
    script: str, args: list[str] = (), *, device: str = "cpu", env: dict | None = None
) -> Result:
    """Like run_python, but the example's main() runs in this process, which has torch
    imported already: a process of its own costs a torch import (several CPU-seconds).

    The code path is `python scripts/X.py`'s: no launcher variables, so a world-size-1
    group on a private store; `common.run` turns a LaunchError into one line on stderr and
    exit code 2 as it does there. Only the interpreter's exit differs (in-process callers
    keep theirs), so runs that need an interpreter of their own (numpy hidden, the real
    entry point) use run_python."""
    mod = load_script(Path(script).stem)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    # patch.dict puts the whole environment back afterwards, the removed variables included.
    with mock.patch.dict(os.environ):
        for k in LAUNCH_VARS:
            os.environ.pop(k, None)
        os.environ.update(env or {})
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                mod.common.run(mod.main, script_args(list(args), device))
        except SystemExit as e:
            # As the interpreter reads it: None is success, a non-int is a message and 1.
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    return Result(code, out.getvalue(), err.getvalue())


# --------------------------------------------------------------------------
# The torchrun commands SKILL.md tells an agent to run
# --------------------------------------------------------------------------

SKILL_MD = ROOT / "SKILL.md"


def skill_commands(prefix: str) -> list[str]:
    """Commands in SKILL.md's fenced code blocks and `inline code` that start with `prefix`."""
    found, fenced = [], False
    for line in SKILL_MD.read_text().splitlines():
        line = line.strip()
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            if line.startswith(prefix):
                found.append(line)
        else:
            found += [m for m in re.findall(r"`([^`]+)`", line) if m.startswith(prefix)]
    return list(dict.fromkeys(found))


def skill_launch_script(cmd: str) -> str:
    """The script a SKILL.md torchrun command runs: 'scripts/ddp_train.py' -> 'ddp_train.py'."""
    (path,) = [a for a in shlex.split(cmd) if a.endswith(".py")]
    return Path(path).name


def run_skill_launch(script: str, tmp_path: Path, env: dict | None = None) -> Result:
    """SKILL.md's torchrun command for `script`, run exactly as written (a /tmp/ path moved
    into tmp_path), from the repo root as the skill's instructions assume.

    Each example test that calls this checks the run's numbers as well, so the command a
    user copies is also the one compared with a single-process reference, and it costs one
    launch, not two (tests/test_skill_commands.py checks that every command is run here).
    GPUs are hidden: two ranks would not fit one GPU, and the references are CPU ones."""
    cmds = [c for c in skill_commands("torchrun ") if skill_launch_script(c) == script]
    assert len(cmds) == 1, f"SKILL.md should have one torchrun command for {script}: {cmds}"
    argv = shlex.split(cmds[0].replace("/tmp/", f"{tmp_path}/"))
    cmd = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    res = finish(start(cmd, {**(env or {}), "CUDA_VISIBLE_DEVICES": ""})).check()
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    # Training examples report their losses; the diagnostics tool reports its verdict.
    assert summary["world_size"] == 2 and (summary.get("losses") or summary.get("ok") is True), (
        summary
    )
    return res


def load_script(name: str):
    """Import an example as a module, for its model and data builders."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module(name)


def reference_lm(
    steps: int,
    dp_world: int,
    *,
    seed: int = 0,
    batch_size: int = 4,
    accum: int = 1,
    lr: float = 1e-2,
    max_norm: float | None = 1.0,
    start_step: int = 0,
    model=None,
    opt=None,
):
    """Train the examples' transformer in one process on every dp rank's batches.

    Data parallelism averages gradients over dp ranks, so each rank's loss is
    scaled by 1/dp_world (and 1/accum per micro-batch) before backward; the
    logged loss is that same average.  Returns (losses, model, optimizer).
    """
    common = load_script("_dist_common")
    if model is None:
        model = common.ToyTransformer()
        model.init_weights(seed)
    if opt is None:
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for step in range(start_step, start_step + steps):
        total = 0.0
        for micro in range(accum):
            for r in range(dp_world):
                x, y = common.token_batch(seed, r, step, batch_size, micro)
                part = common.lm_loss(model(x), y) / (accum * dp_world)
                part.backward()
                total += part.item()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total)
    return losses, model, opt


def assert_one_line_error(res: Result, *needles: str) -> None:
    """A bad launch: non-zero exit, our one-line 'error:' message, no traceback from the script."""
    assert res.returncode != 0, res.stdout[-2000:]
    lines = [
        ln
        for ln in res.stderr.splitlines()
        if "error: " in ln and not ln.startswith(("E", "W", "I"))
    ]
    assert lines, res.stderr[-3000:]
    for needle in needles:
        assert any(needle in ln for ln in lines), (needle, lines)
    # torchrun's own agent prints a ChildFailedError trace; the script itself must not.
    assert f'File "{SCRIPTS}' not in res.stderr, res.stderr[-3000:]
    assert "Traceback" not in "\n".join(
        ln for ln in res.stderr.splitlines() if ln.startswith("[rank")
    )


def read_safetensors(path) -> dict:
    """Pickle-free reader for the examples' safetensors export (numpy arrays)."""
    import numpy as np

    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        lo, hi = meta["data_offsets"]
        out[name] = np.frombuffer(raw[base + lo : base + hi], dtype=dtypes[meta["dtype"]]).reshape(
            meta["shape"]
        )
    return out
