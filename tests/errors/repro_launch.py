"""Reproductions for references/guides/errors/launch-and-elastic.md (see errors_harness.py).

Most launcher messages are printed by a separate process (torchrun's agent, a worker that
crashed), so these repros start one with `subprocess` and return what it printed.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

from errors_harness import repro

_LAUNCH_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "TORCH_DISTRIBUTED_DEBUG",
    "OMP_NUM_THREADS",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict:
    """The environment of a fresh shell: no launcher variables from the harness's own run."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _LAUNCH_ENV and not k.startswith("TORCHELASTIC_")
    }
    env.update(PYTHONWARNINGS="default", PYTHONUNBUFFERED="1", **extra)
    return env


def run_ranks(
    code: str, world: int = 2, rank: int = 0, env: dict | None = None, timeout: float = 60
) -> str:
    """Run `code` as `world` plain python processes wired up like torchrun would (RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT); return the stderr of process `rank`."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(code))
        procs = []
        for r in range(world):
            e = clean_env(
                RANK=str(r),
                WORLD_SIZE=str(world),
                LOCAL_RANK=str(r),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                OMP_NUM_THREADS="1",
                **(env or {}),
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, path],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=e,
                    cwd=tmp,
                )
            )
        errs = []
        for p in procs:
            try:
                errs.append(p.communicate(timeout=timeout)[1])
            except subprocess.TimeoutExpired:
                p.kill()
                errs.append(p.communicate()[1])
        return errs[rank]


def run_torchrun(args: list[str], code: str, env: dict | None = None, timeout: float = 60) -> str:
    """Run `torchrun ARGS train.py` on `code`; return everything it printed (stdout + stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(code))
        cmd = [sys.executable, "-m", "torch.distributed.run", *args, path]
        try:
            p = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                env=clean_env(**(env or {})),
                cwd=tmp,
                timeout=timeout,
            )
            return p.stdout + p.stderr
        except subprocess.TimeoutExpired as exc:
            return _text(exc.stdout) + _text(exc.stderr)


def _text(out) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def _lines(text: str, *needles: str) -> str:
    """The lines of `text` that contain one of `needles`."""
    return "\n".join(line for line in text.splitlines() if any(n in line for n in needles))


# --- environment variables: a script started without a launcher ---------------------------


@repro("launch-env-var-not-set", pg=False)
def _():
    import torch.distributed as dist

    saved = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(k, None)
    try:
        dist.init_process_group("gloo")
    finally:
        os.environ.clear()
        os.environ.update(saved)


@repro("launch-local-rank-keyerror", pg=False)
def _():
    saved = os.environ.pop("LOCAL_RANK", None)
    try:
        int(os.environ["LOCAL_RANK"])
    finally:
        if saved is not None:
            os.environ["LOCAL_RANK"] = saved


@repro("launch-tcp-init-rank-missing", pg=False)
def _():
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", world_size=2)


# --- the TCPStore: ports and peers that never come ----------------------------------------


@repro("launch-port-in-use", pg=False)
def _():
    import datetime

    import torch.distributed as dist

    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        dist.TCPStore(
            "127.0.0.1", port, world_size=1, is_master=True, timeout=datetime.timedelta(seconds=5)
        )


@repro("launch-rdzv-store-connection-failed", pg=False)
def _():
    import datetime
    import gc

    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )

    # Job B's agent is a client of the store that job A's agent hosts; then job A exits.
    host = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = dist.TCPStore(
        "127.0.0.1", host.port, is_master=False, timeout=datetime.timedelta(seconds=5)
    )
    backend = C10dRendezvousBackend(client, "job-b")
    backend.get_state()
    del host
    gc.collect()
    backend.get_state()


@repro("launch-store-clients-not-joined", pg=False)
def _():
    import datetime

    import torch.distributed as dist

    dist.TCPStore(
        "127.0.0.1",
        free_port(),
        world_size=2,
        is_master=True,
        wait_for_workers=True,
        timeout=datetime.timedelta(seconds=2),
    )


@repro("launch-client-connect-timeout", pg=False)
def _():
    import datetime

    import torch.distributed as dist

    dist.TCPStore(
        "127.0.0.1",
        free_port(),
        world_size=2,
        is_master=False,
        timeout=datetime.timedelta(seconds=2),
    )


# --- torchrun -----------------------------------------------------------------------------

_CRASHING_RANK = """
import os, time
if os.environ["RANK"] == "0":
    raise ValueError("bad batch")
time.sleep(30)
"""


@functools.cache
def _torchrun_with_a_crashing_rank() -> str:
    # Two workers, one of which raises; OMP_NUM_THREADS is left unset.
    return run_torchrun(["--standalone", "--nproc-per-node=2"], _CRASHING_RANK)


@repro("launch-child-failed", pg=False)
def _():
    return _torchrun_with_a_crashing_rank()


@repro("launch-omp-num-threads", pg=False)
def _():
    # Two workers that succeed, OMP_NUM_THREADS unset: the agent's warning is all it prints.
    return run_torchrun(["--standalone", "--nproc-per-node=2"], "pass\n")


@repro("launch-closing-signal-sigterm", pg=False)
def _():
    # The agent's own log lines from the crash above (a user pastes these, not the summary).
    return _lines(_torchrun_with_a_crashing_rank(), "closing signal", "failed (exitcode")


@repro("launch-rendezvous-timeout", pg=False)
def _():
    # A job of two nodes of which only one ever starts.
    return run_torchrun(
        [
            "--nnodes=2",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{free_port()}",
            "--rdzv-conf=join_timeout=3",
        ],
        "print('never runs')\n",
        env={"OMP_NUM_THREADS": "1"},
    )


@repro("launch-nproc-per-node-invalid", pg=False)
def _():
    return run_torchrun(
        ["--standalone", "--nproc-per-node=gpux"],
        "print('never runs')\n",
        env={"OMP_NUM_THREADS": "1"},
    )


def _old_launcher(script: str) -> str:
    """`python -m torch.distributed.launch --nproc-per-node=1 train.py`: all it printed."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.py")
        with open(path, "w") as f:
            f.write(script)
        p = subprocess.run(
            [sys.executable, "-m", "torch.distributed.launch", "--nproc-per-node=1", path],
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(OMP_NUM_THREADS="1"),
            cwd=tmp,
        )
        return p.stdout + p.stderr


@repro("launch-deprecated-launch-module", pg=False)
def _():
    return _old_launcher("pass\n")


@repro("launch-unrecognized-local-rank", pg=False)
def _():
    # A script whose argparse knows nothing of --local-rank; its own usage/error lines.
    out = _old_launcher("import argparse\nargparse.ArgumentParser().parse_args()\n")
    return _lines(out, "usage:", "error: unrecognized")


def _torchrun_cancelled(worker: str, *flags: str) -> str:
    """Everything a one-worker torchrun job prints when torchrun gets SIGTERM (the scheduler
    cancelling the job) while `worker` (a script that creates ./started, then sleeps) runs."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.py")
        with open(path, "w") as f:
            f.write(worker)
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node=1",
                *flags,
                path,
            ],
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=clean_env(OMP_NUM_THREADS="1"),
        )
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(tmp, "started")) and time.monotonic() < deadline:
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        try:
            return p.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            return p.communicate()[0]


@repro("launch-agent-got-signal", pg=False)
def _():
    return _torchrun_cancelled("import time\nopen('started', 'w').close()\ntime.sleep(60)\n")


@repro("launch-shutdown-sigkill", pg=False)
def _():
    # A worker that handles SIGTERM (to save a checkpoint) outlives torchrun's shutdown timeout.
    worker = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: None)\n"
        "open('started', 'w').close()\n"
        "time.sleep(60)\n"
    )
    return _torchrun_cancelled(worker, "--shutdown-timeout=1")


# --- torch.multiprocessing.spawn ----------------------------------------------------------


def _worker_raises(rank: int) -> None:
    if rank == 1:
        raise ValueError("bad batch")


def _worker_exits(rank: int) -> None:
    if rank == 1:
        os._exit(3)


@repro("launch-spawn-process-raised", pg=False)
def _():
    import torch.multiprocessing as mp

    # mp.spawn(fn, nprocs=2) fails the same way; fork keeps the repro fast.
    mp.start_processes(_worker_raises, nprocs=2, start_method="fork")


@repro("launch-spawn-process-exited", pg=False)
def _():
    import torch.multiprocessing as mp

    mp.start_processes(_worker_exits, nprocs=2, start_method="fork")
