#!/usr/bin/env python
"""Check a torch.distributed setup: versions, launcher, devices, collectives, bandwidth.

    torchrun --nproc-per-node 8 scripts/diagnose.py
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 scripts/diagnose.py
    torchrun --nproc-per-node 8 scripts/diagnose.py --json > report.json
    python scripts/diagnose.py                      # one process: versions and devices only

Launch it exactly like the job that misbehaves (same launcher, nodes,
container and environment variables): it is the first thing to run when a
job hangs at start, crashes in its first collective or runs slower than it
should.  Rank 0 prints a markdown report (``--json``: one JSON line);
every other rank stays quiet unless something fails.

In order, each step with a deadline (``--timeout-s``):

1. each rank notes its versions (torch, CUDA, NCCL), its launcher variables
   (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, ...), the NCCL_*,
   TORCH_* and GLOO_* variables that are set, and what devices it sees;
2. every rank checks in at the rendezvous store; ranks that never arrive
   are named;
3. rank 0 compares the ranks: different versions, different WORLD_SIZE or
   MASTER_ADDR, two ranks on one GPU, a LOCAL_RANK without a GPU;
4. ``init_process_group``, then a barrier, an all-reduce, an all-gather and
   a reduce-scatter on values every rank can predict, so a wrong result
   names the rank whose data arrived wrong;
5. bandwidth: all-reduce bus bandwidth (as nccl-tests reports it),
   send/recv around a ring (one link per rank) and a matmul per rank, each
   rank timed by its fastest repetition; ranks below ``--slow-factor`` of
   the median are named.

A step that does not finish in time turns into a report, never a silent
wait: a watchdog thread per rank reads every rank's progress from the store
and names the ranks that are missing from the stuck step (not arrived,
stuck earlier, or gone ahead to a later collective: a desync).  The process
group timeout is twice ``--timeout-s``, so the watchdog reports before
NCCL's own watchdog aborts the process.

Exit status: 0 all checks passed, 1 a problem was found, 2 bad usage.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist

LAUNCH_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_NODEID",
)
COMM_PREFIXES = ("NCCL_", "TORCH_", "GLOO_")
CHECKS = ("barrier", "all_reduce", "all_gather", "reduce_scatter", "bandwidth")

# Test-only fault injection, "kind:step:rank[,...]": skip (leave out the step's
# collective), corrupt (send wrong data), slow (stall the step's timing),
# absent (arrive far too late at the rendezvous).
FAULTS = [tuple(f.split(":")) for f in os.environ.get("DIAGNOSE_TEST_FAULT", "").split(",") if f]


def fault(kind: str, step: str, rank: int) -> bool:
    return (kind, step, str(rank)) in FAULTS


class UsageError(Exception):
    """A bad flag; reported as one line with exit code 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto: cuda when a GPU is visible, else cpu",
    )
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "nccl", "gloo"],
        help="auto: nccl on cuda, gloo on cpu",
    )
    p.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        help="deadline for each step; a step past it is reported as a hang",
    )
    p.add_argument(
        "--size-mb",
        type=float,
        default=None,
        help="message size for the bandwidth test (default: 256 on cuda, 8 on cpu)",
    )
    p.add_argument(
        "--iters", type=int, default=None, help="timed repetitions (default: 20 on cuda, 3 on cpu)"
    )
    p.add_argument(
        "--slow-factor",
        type=float,
        default=0.5,
        help="a rank below this fraction of the median throughput is reported as slow",
    )
    p.add_argument(
        "--json", action="store_true", help="one JSON line on stdout instead of markdown"
    )
    args = p.parse_args(argv)
    if (
        args.timeout_s <= 0
        or (args.size_mb is not None and args.size_mb <= 0)
        or (args.iters is not None and args.iters < 1)
        or not 0 < args.slow_factor < 1
    ):
        p.error("need --timeout-s > 0, --size-mb > 0, --iters >= 1 and 0 < --slow-factor < 1")
    return args


# --------------------------------------------------------------------------
# Step 1: what this rank sees
# --------------------------------------------------------------------------


def nccl_version() -> str | None:
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        return None


def local_info(args) -> dict:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    info = {
        "rank": int(os.environ.get("RANK", "0")),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl_version() if torch.cuda.is_available() else None,
        "launcher": {k: os.environ[k] for k in LAUNCH_VARS if k in os.environ},
        "comm_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(COMM_PREFIXES)},
        "cuda_available": torch.cuda.is_available(),
        "gpus_visible": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "device": None,
        "device_error": None,
    }
    want = (
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    if want == "cpu":
        info["device"] = {"name": "cpu", "type": "cpu", "cores": os.cpu_count()}
    elif not torch.cuda.is_available():
        info["device_error"] = "--device cuda but no CUDA device is visible to this rank"
    elif local_rank >= torch.cuda.device_count():
        info["device_error"] = (
            f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPU(s) visible "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
        )
    else:
        torch.cuda.set_device(local_rank)
        props = torch.cuda.get_device_properties(local_rank)
        free, total = torch.cuda.mem_get_info(local_rank)
        info["device"] = {
            "type": "cuda",
            "index": local_rank,
            "name": props.name,
            "uuid": str(props.uuid),
            "capability": f"{props.major}.{props.minor}",
            "mem_free_gib": round(free / 2**30, 1),
            "mem_total_gib": round(total / 2**30, 1),
        }
    backend = args.backend if args.backend != "auto" else ("nccl" if want == "cuda" else "gloo")
    if not dist.is_backend_available(backend):
        info["device_error"] = (
            info["device_error"] or f"backend {backend!r} is not available in this torch build"
        )
    if backend == "nccl" and want == "cpu":
        info["device_error"] = "--backend nccl needs --device cuda"
    info["backend"] = backend
    return info


# --------------------------------------------------------------------------
# The store: every rank's info, progress and results, readable after a hang
# --------------------------------------------------------------------------


def connect(timeout: datetime.timedelta):
    """(store, watchdog_store, rank, world). The watchdog gets its own connection: a client
    blocked in one request cannot serve another."""
    if "MASTER_ADDR" not in os.environ:
        if int(os.environ.get("WORLD_SIZE", "1")) != 1:
            raise UsageError("WORLD_SIZE > 1 but no MASTER_ADDR: launch with torchrun")
        store = dist.HashStore()
        return store, store, 0, 1
    store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
    watch = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=datetime.timedelta(seconds=10),
    )
    prefix = f"diagnose/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return dist.PrefixStore(prefix, store), dist.PrefixStore(prefix, watch), rank, world


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""


def put(store, key: str, value) -> None:
    store.set(key, json.dumps(value))


def get(store, key: str, default=None):
    return json.loads(store.get(key)) if store.check([key]) else default


def wait_keys(store, keys: list[str], deadline: float) -> list[str]:
    """Poll until every key exists or the deadline passes; return the missing ones."""
    missing = list(keys)
    while missing and time.monotonic() < deadline:
        missing = [k for k in missing if not store.check([k])]
        if missing:
            time.sleep(0.05)
    return missing


def who(infos: dict, ranks) -> str:
    """'rank 1 (host a)', 'ranks 2, 3 (host b)' or a whole host."""
    ranks = sorted(ranks)
    by_host: dict[str, list[int]] = {}
    for r in ranks:
        by_host.setdefault(infos.get(r, {}).get("host", "unknown host"), []).append(r)
    parts = []
    for host, rs in by_host.items():
        on_host = [r for r, i in infos.items() if i.get("host") == host]
        label = "rank" if len(rs) == 1 else "ranks"
        whole = len(rs) > 1 and sorted(on_host) == rs
        parts.append(
            f"host {host} (all its ranks: {', '.join(map(str, rs))})"
            if whole
            else f"{label} {', '.join(map(str, rs))} (host {host})"
        )
    return "; ".join(parts)


def analyse_progress(store, world: int, infos: dict) -> tuple[str, list[int]]:
    """From every rank's last progress record: which step is stuck and who is missing from it."""
    prog = {r: get(store, f"progress/{r}") for r in range(world)}
    waiting = {r: p for r, p in prog.items() if p and p["state"] == "entered"}
    if not waiting:
        return "no rank is inside a step; a rank may have crashed (see its stderr)", [
            r for r, p in prog.items() if p is None
        ]
    stuck_index = min(p["index"] for p in waiting.values())
    stuck = next(p["step"] for p in waiting.values() if p["index"] == stuck_index)
    inside = sorted(r for r, p in waiting.items() if p["index"] == stuck_index)
    lines, culprits = [], []
    for r, p in sorted(prog.items()):
        if r in inside:
            continue
        culprits.append(r)
        if p is None:
            lines.append(
                f"{who(infos, [r])} never reported progress (not started, or crashed early)"
            )
        elif p["index"] > stuck_index or p["state"] != "entered":
            where = f"{p['step']} ({p['state']})"
            lines.append(
                f"{who(infos, [r])} is not in {stuck}: it went on to {where} without taking part "
                "(a desync: ranks calling collectives in a different order)"
            )
        else:
            lines.append(f"{who(infos, [r])} has not reached {stuck}: it is still in {p['step']}")
    if not culprits:
        return (
            f"all {world} ranks are inside {stuck} and none finished: the transport is stuck "
            "(check NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME, firewalls between hosts, NCCL_IB_*; "
            "rerun with NCCL_DEBUG=INFO)"
        ), []
    verb = "waits" if len(inside) == 1 else "wait"
    return f"{who(infos, inside)} {verb} in {stuck}; " + "; ".join(lines), culprits


class Watchdog(threading.Thread):
    """Turns a step that overruns its deadline, on any rank, into a report."""

    def __init__(self, store, rank: int, world: int, timeout_s: float, on_failure):
        super().__init__(daemon=True)
        self.store, self.rank, self.world, self.timeout_s, self.on_failure = (
            store,
            rank,
            world,
            timeout_s,
            on_failure,
        )
        self.step, self.deadline, self.lock, self.stop = (
            None,
            None,
            threading.Lock(),
            threading.Event(),
        )

    def arm(self, step: str) -> None:
        with self.lock:
            self.step, self.deadline = step, time.monotonic() + self.timeout_s

    def disarm(self) -> None:
        with self.lock:
            self.step, self.deadline = None, None

    def run(self) -> None:
        while not self.stop.wait(0.25):
            with self.lock:
                step, deadline = self.step, self.deadline
            try:
                aborted = self.store.check(["abort"])
            except Exception:
                aborted = False
            if deadline is not None and time.monotonic() > deadline:
                try:
                    put(self.store, "abort", {"rank": self.rank, "step": step})
                except Exception:
                    pass
                self.on_failure(
                    step, f"{step} did not finish within {self.timeout_s:g} s on rank {self.rank}"
                )
            elif aborted:
                a = get(self.store, "abort", {})
                self.on_failure(step, f"rank {a.get('rank')} timed out in {a.get('step')}")


# --------------------------------------------------------------------------
# Steps 4 and 5: collectives with known answers, then bandwidth
# --------------------------------------------------------------------------


def pattern(src: int, n: int, device) -> torch.Tensor:
    """What rank `src` sends: small integers, exact in float32 even when summed over many ranks."""
    return ((torch.arange(n, device=device) % 13 + 1) * (src + 1)).float()


def check_all_reduce(rank: int, world: int, device, n: int = 1024) -> dict:
    # Each rank fills only its own row, so a wrong row names the sender.
    t = torch.zeros(world, n, device=device)
    t[rank] = pattern(rank, n, device) + (1 if fault("corrupt", "all_reduce", rank) else 0)
    if not fault("skip", "all_reduce", rank):
        dist.all_reduce(t)
    bad = [j for j in range(world) if not torch.equal(t[j], pattern(j, n, device))]
    return {"ok": not bad, "bad_sources": bad}


def check_all_gather(rank: int, world: int, device, n: int = 1024) -> dict:
    mine = pattern(rank, n, device) + (1 if fault("corrupt", "all_gather", rank) else 0)
    out = torch.empty(world * n, device=device)
    if not fault("skip", "all_gather", rank):
        # all_gather_single is 2.13's name for all_gather_into_tensor.
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, mine)
    bad = [
        j for j in range(world) if not torch.equal(out[j * n : (j + 1) * n], pattern(j, n, device))
    ]
    return {"ok": not bad, "bad_sources": bad}


def check_reduce_scatter(rank: int, world: int, device, n: int = 1024) -> dict:
    # Rank r sends pattern(r) to every destination: everyone receives sum_r pattern(r).
    inp = pattern(rank, n, device).repeat(world) + (
        1 if fault("corrupt", "reduce_scatter", rank) else 0
    )
    out = torch.empty(n, device=device)
    if not fault("skip", "reduce_scatter", rank):
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)
    want = sum(pattern(r, n, device) for r in range(world))
    ok = torch.equal(out, want)
    return {"ok": ok, "bad_sources": [] if ok else ["unknown"]}


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def call_seconds(fn, iters: int, device, warmup: int = 1) -> list[float]:
    """Seconds of each of ``iters`` timed calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return times


def median_seconds(fn, iters: int, device, warmup: int = 1) -> float:
    """Median time of one call, the figure reported for all_reduce bandwidth."""
    return statistics.median(call_seconds(fn, iters, device, warmup))


def best_seconds(fn, iters: int, device, warmup: int = 1) -> float:
    """Fastest call: the basis of the slow-rank checks.

    A throttled or shared device is slow on every repetition, while a host busy with other
    processes deschedules some of them; the median of a few calls still flagged a healthy rank
    on a loaded CPU box, the fastest call does not.
    """
    return min(call_seconds(fn, iters, device, warmup))


def measure_bandwidth(rank: int, world: int, device, size_mb: float, iters: int) -> dict:
    numel = max(1, int(size_mb * 2**20) // 4)
    res = {"size_mb": size_mb, "iters": iters}
    if world > 1 and not fault("skip", "bandwidth", rank):
        buf = torch.zeros(
            numel, device=device
        )  # ones would overflow after a few sums on many ranks
        dt = median_seconds(lambda: dist.all_reduce(buf), iters, device, warmup=2)
        algbw = numel * 4 / dt / 1e9
        # nccl-tests' bus bandwidth: what each link carried in a ring all-reduce.
        res.update(all_reduce_s=dt, algbw_gbps=algbw, busbw_gbps=algbw * 2 * (world - 1) / world)

        # Ring: each rank sends right and receives from the left; a slow receive points at one link.
        send, recv = torch.ones(numel, device=device), torch.empty(numel, device=device)
        right, left = (rank + 1) % world, (rank - 1) % world

        def ring():
            ops = [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()

        res["ring_recv_gbps"] = numel * 4 / best_seconds(ring, iters, device) / 1e9
        res["ring_from"] = left

    # Local compute, no communication: a throttled, shared or wrong device shows here.
    n = 4096 if device.type == "cuda" else 256
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a, b = (
        torch.randn(n, n, device=device, dtype=dtype),
        torch.randn(n, n, device=device, dtype=dtype),
    )

    def matmul():
        a @ b
        if fault("slow", "bandwidth", rank):
            time.sleep(0.2)

    # A small matmul is cheap, so more repetitions than the bandwidth test make the best one stable.
    res["matmul_tflops"] = 2 * n**3 / best_seconds(matmul, max(iters, 10), device) / 1e12
    return res


# --------------------------------------------------------------------------
# Rank 0: put it together
# --------------------------------------------------------------------------


def consistency_problems(infos: dict) -> list[dict]:
    problems = []

    def differing(label: str, value_of) -> None:
        groups: dict[str, list[int]] = {}
        for r, i in infos.items():
            groups.setdefault(str(value_of(i)), []).append(r)
        if len(groups) > 1:
            majority = max(groups, key=lambda k: len(groups[k]))
            for v, rs in groups.items():
                if v != majority:
                    problems.append(
                        {
                            "kind": "mismatch",
                            "ranks": rs,
                            "message": f"{who(infos, rs)}: {label} is {v}, the other ranks have {majority}",
                        }
                    )

    differing("torch", lambda i: i["torch"])
    differing("CUDA", lambda i: i["cuda"])
    differing("NCCL", lambda i: i["nccl"])
    differing("WORLD_SIZE", lambda i: i["launcher"].get("WORLD_SIZE"))
    differing(
        "MASTER_ADDR:MASTER_PORT",
        lambda i: f"{i['launcher'].get('MASTER_ADDR')}:{i['launcher'].get('MASTER_PORT')}",
    )
    differing("backend", lambda i: i["backend"])
    for r, i in infos.items():
        if i["device_error"]:
            problems.append(
                {
                    "kind": "device",
                    "ranks": [r],
                    "message": f"{who(infos, [r])}: {i['device_error']}",
                }
            )
    gpus: dict[tuple, list[int]] = {}
    for r, i in infos.items():
        if i["device"] and i["device"].get("uuid"):
            gpus.setdefault((i["host"], i["device"]["uuid"]), []).append(r)
    for (_host, uuid), rs in gpus.items():
        if len(rs) > 1:
            problems.append(
                {
                    "kind": "device",
                    "ranks": rs,
                    "message": f"{who(infos, rs)} share one GPU ({uuid}): set the device from LOCAL_RANK",
                }
            )
    return problems


def slow_problems(infos: dict, bw: dict, factor: float) -> list[dict]:
    problems = []
    for key, what, unit in (
        ("matmul_tflops", "matmul throughput", "TFLOP/s"),
        ("ring_recv_gbps", "ring receive bandwidth", "GB/s"),
    ):
        values = {r: b[key] for r, b in bw.items() if b and key in b}
        if len(values) < 2:
            continue
        median = statistics.median(values.values())
        slow = sorted(r for r, v in values.items() if v < factor * median)
        for r in slow:
            src = f" from rank {bw[r]['ring_from']}" if key == "ring_recv_gbps" else ""
            problems.append(
                {
                    "kind": "slow",
                    "ranks": [r],
                    "message": f"{who(infos, [r])}: {what}{src} {values[r]:.3g} {unit} is below {factor:g} x "
                    f"the median {median:.3g} {unit}",
                }
            )
    return problems


def table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join("" if c is None else str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def markdown(rep: dict) -> str:
    infos = {i["rank"]: i for i in rep["ranks"]}
    hosts = sorted({i["host"] for i in infos.values()})
    verdict = "PASS" if rep["ok"] else "FAIL"
    lines = [
        f"# torch.distributed diagnosis: {verdict}",
        "",
        f"{rep['world_size']} rank(s) on {len(hosts)} host(s) ({', '.join(hosts)}), backend "
        f"{rep['backend']}, device {rep['device']}",
        "",
        "## Problems",
        "",
    ]
    lines += [f"- **{p['kind']}**: {p['message']}" for p in rep["problems"]] or ["None found."]
    lines += ["", "## Versions", ""]
    rows = []
    for label, key in (
        ("python", "python"),
        ("torch", "torch"),
        ("CUDA", "cuda"),
        ("NCCL", "nccl"),
    ):
        values = sorted({str(i[key]) for i in infos.values()})
        rows.append([label, values[0] if len(values) == 1 else "DIFFERS: " + ", ".join(values)])
    lines += [table(["", "all ranks"], rows), "", "## Launcher environment", ""]
    lines.append(
        table(
            ["rank", "host", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR:PORT", "restart"],
            [
                [
                    r,
                    i["host"],
                    i["launcher"].get("LOCAL_RANK"),
                    i["launcher"].get("WORLD_SIZE"),
                    f"{i['launcher'].get('MASTER_ADDR', '-')}:{i['launcher'].get('MASTER_PORT', '-')}",
                    i["launcher"].get("TORCHELASTIC_RESTART_COUNT"),
                ]
                for r, i in sorted(infos.items())
            ],
        )
    )
    all_env = sorted({k for i in infos.values() for k in i["comm_env"]})
    lines += ["", "NCCL_* / TORCH_* / GLOO_* variables set:", ""]
    if not all_env:
        lines.append("none")
    for k in all_env:
        values = {str(i["comm_env"].get(k)) for i in infos.values()}
        same = len(values) == 1 and "None" not in values
        lines.append(
            f"- `{k}={next(iter(values))}`"
            if same
            else f"- `{k}` differs: "
            + ", ".join(
                f"rank {r}: {i['comm_env'].get(k, 'unset')}" for r, i in sorted(infos.items())
            )
        )
    lines += ["", "## Devices", ""]
    lines.append(
        table(
            [
                "rank",
                "host",
                "device",
                "name",
                "GPUs visible",
                "CUDA_VISIBLE_DEVICES",
                "free/total GiB",
                "problem",
            ],
            [
                [
                    r,
                    i["host"],
                    (i["device"] or {}).get("index", (i["device"] or {}).get("type")),
                    (i["device"] or {}).get("name"),
                    i["gpus_visible"],
                    i["launcher"].get("CUDA_VISIBLE_DEVICES", "unset"),
                    f"{i['device']['mem_free_gib']}/{i['device']['mem_total_gib']}"
                    if i["device"] and "mem_free_gib" in i["device"]
                    else None,
                    i["device_error"],
                ]
                for r, i in sorted(infos.items())
            ],
        )
    )
    lines += ["", "## Collectives", ""]
    lines.append(
        table(
            ["check", "result", "slowest rank (s)"],
            [
                [c["name"], "ok" if c["ok"] else "FAILED: " + c["detail"], f"{c['seconds']:.4f}"]
                for c in rep["checks"]
            ],
        )
        if rep["checks"]
        else "Not run."
    )
    bw = rep.get("bandwidth")
    lines += ["", "## Bandwidth", ""]
    if bw:
        if bw.get("busbw_gbps") is not None:
            lines.append(
                f"all_reduce of {bw['size_mb']:g} MiB x {bw['iters']}: bus bandwidth "
                f"{bw['busbw_gbps']:.3f} GB/s, algorithm bandwidth {bw['algbw_gbps']:.3f} GB/s "
                "(slowest rank)"
            )
            lines.append("")
        lines.append(
            table(
                ["rank", "host", "ring receive GB/s", "matmul TFLOP/s"],
                [
                    [
                        r,
                        infos[r]["host"],
                        f"{b['ring_recv_gbps']:.3f} (from {b['ring_from']})"
                        if "ring_recv_gbps" in b
                        else "-",
                        f"{b['matmul_tflops']:.4f}",
                    ]
                    for r, b in sorted(bw["per_rank"].items())
                ],
            )
        )
    else:
        lines.append("Not run.")
    return "\n".join(lines)


def emit(rep: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(rep, sort_keys=True), flush=True)
    else:
        print(markdown(rep), flush=True)
        print(
            json.dumps(
                {
                    "script": rep["script"],
                    "ok": rep["ok"],
                    "world_size": rep["world_size"],
                    "problems": [p["message"] for p in rep["problems"]],
                },
                sort_keys=True,
            ),
            flush=True,
        )


def gather_infos(store, world: int) -> dict:
    return {r: i for r in range(world) if (i := get(store, f"info/{r}")) is not None}


def base_report(infos: dict, world: int, info: dict) -> dict:
    return {
        "script": os.path.basename(__file__),
        "world_size": world,
        "backend": info["backend"],
        "device": (info["device"] or {}).get("type", "none"),
        "ranks": [infos[r] for r in sorted(infos)],
        "checks": [],
        "bandwidth": None,
        "problems": [],
        "ok": False,
    }


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    timeout = datetime.timedelta(seconds=args.timeout_s)
    info = local_info(args)
    try:
        store, watch_store, rank, world = connect(timeout)
    except UsageError:
        raise
    except Exception as e:  # the store is unreachable: nothing else can be checked
        addr = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        print(
            f"[rank {info['rank']}] diagnose: cannot reach the rendezvous store at {addr} within "
            f"{args.timeout_s:g} s ({type(e).__name__}: {first_line(e)})",
            file=sys.stderr,
        )
        return 1
    info["rank"] = rank
    if fault("absent", "rendezvous", rank):
        time.sleep(3 * args.timeout_s)
    put(store, f"info/{rank}", info)
    reported = threading.Event()

    def on_failure(step, reason: str, kind: str = "hang") -> None:
        if reported.is_set():
            return
        reported.set()
        try:
            infos = gather_infos(watch_store, world)
            analysis, culprits = analyse_progress(watch_store, world, infos)
        except Exception as e:
            infos, analysis, culprits = (
                {rank: info},
                f"the store is unreachable too ({type(e).__name__})",
                [],
            )
        if rank == 0:
            rep = base_report(infos, world, info)
            rep["checks"] = done_checks
            rep["problems"] = [
                {"kind": kind, "ranks": culprits, "message": f"{reason}. {analysis}"}
            ]
            rep["hang"] = {"step": step, "culprits": culprits}
            emit(rep, args.json)
            try:
                put(watch_store, "reported", True)
            except Exception:
                pass
        else:
            print(f"[rank {rank}] diagnose: {reason}. {analysis}", file=sys.stderr, flush=True)
            # Give rank 0 time to print before torchrun stops the job because we exited.
            wait_keys(watch_store, ["reported"], time.monotonic() + 15)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    done_checks: list[dict] = []
    watchdog = Watchdog(watch_store, rank, world, args.timeout_s, on_failure)
    watchdog.start()
    index = 0

    def enter(step: str, watch: bool = True) -> None:
        nonlocal index
        index += 1
        put(store, f"progress/{rank}", {"index": index, "step": step, "state": "entered"})
        if watch:
            watchdog.arm(step)

    def leave(step: str, result: dict) -> None:
        watchdog.disarm()
        put(store, f"result/{step}/{rank}", result)
        put(store, f"progress/{rank}", {"index": index, "step": step, "state": "done"})

    # Step 2: every rank checks in (a counter, so the store sees one poll per rank, not one per pair).
    enter("rendezvous", watch=False)  # its own deadline, to name the ranks that never came
    store.add("arrived", 1)
    deadline = time.monotonic() + args.timeout_s
    while store.add("arrived", 0) < world and time.monotonic() < deadline:
        time.sleep(0.05)

    # Step 3, on rank 0: compare the ranks before trusting them with a process group.
    infos, problems = {}, []
    if rank == 0:
        infos = gather_infos(store, world)
        missing = sorted(set(range(world)) - set(infos))
        if missing:
            problems.append(
                {
                    "kind": "missing",
                    "ranks": missing,
                    "message": f"rank(s) {', '.join(map(str, missing))} never reached the rendezvous store within "
                    f"{args.timeout_s:g} s: not launched, crashed at start, or started with a different "
                    "MASTER_ADDR/MASTER_PORT or WORLD_SIZE",
                }
            )
        problems += consistency_problems(infos)
        stop = any(
            p["kind"] in ("missing", "device") or "backend" in p["message"] for p in problems
        )
        put(store, "preflight", {"stop": stop})
        if stop:
            rep = base_report(infos, world, info)
            rep["problems"] = problems
            emit(rep, args.json)
            return 1
    else:
        if wait_keys(store, ["preflight"], time.monotonic() + args.timeout_s):
            print(
                f"[rank {rank}] diagnose: rank 0 gave no verdict within {args.timeout_s:g} s",
                file=sys.stderr,
            )
            return 1
        if get(store, "preflight")["stop"]:
            return 1  # rank 0 reports why
    leave("rendezvous", {"ok": True})
    device = (
        torch.device("cpu")
        if (info["device"] or {}).get("type") != "cuda"
        else torch.device("cuda", info["device"]["index"])
    )

    def step(name: str, fn) -> dict:
        enter(name)
        t0 = time.perf_counter()
        try:
            result = fn() or {"ok": True}
            sync(device)
        except Exception as e:  # gloo's own timeout, a NCCL error: reported like a hang
            on_failure(
                name, f"{name} raised on rank {rank}: {type(e).__name__}: {first_line(e)}", "error"
            )
        result["seconds"] = time.perf_counter() - t0
        leave(name, result)
        done_checks.append(
            {
                "name": name,
                "ok": result.get("ok", True),
                "seconds": result["seconds"],
                "detail": "" if result.get("ok", True) else f"wrong data on rank {rank}",
            }
        )
        return result

    # Step 4: the process group and the collectives.
    step(
        "init_process_group",
        lambda: dist.init_process_group(
            info["backend"],
            store=dist.PrefixStore("pg", store),
            rank=rank,
            world_size=world,
            timeout=2 * timeout,
            device_id=device if device.type == "cuda" else None,
        ),
    )
    checks = {
        "barrier": lambda: None if fault("skip", "barrier", rank) else dist.barrier(),
        "all_reduce": lambda: check_all_reduce(rank, world, device),
        "all_gather": lambda: check_all_gather(rank, world, device),
        "reduce_scatter": lambda: check_reduce_scatter(rank, world, device),
    }
    for name, fn in checks.items():
        step(name, fn)

    # Step 5: bandwidth.
    size_mb = args.size_mb or (256.0 if device.type == "cuda" else 8.0)
    iters = args.iters or (20 if device.type == "cuda" else 3)
    step("bandwidth", lambda: measure_bandwidth(rank, world, device, size_mb, iters))
    step("final barrier", dist.barrier)

    status = 0
    if rank == 0:
        per_rank = {s: {r: get(store, f"result/{s}/{r}") for r in range(world)} for s in CHECKS}
        rep = base_report(infos, world, info)
        rep["checks"] = []
        for name in checks:
            results = per_rank[name]
            bad = {r: res["bad_sources"] for r, res in results.items() if not res["ok"]}
            detail = ""
            if bad:
                senders = sorted({s for v in bad.values() for s in v if s != "unknown"})
                detail = (
                    f"data from {who(infos, senders)} arrived wrong"
                    if senders
                    else f"wrong result on {who(infos, bad)}"
                )
                problems.append(
                    {
                        "kind": "wrong",
                        "ranks": senders or sorted(bad),
                        "message": f"{name}: {detail} (seen by {who(infos, bad)})",
                    }
                )
            rep["checks"].append(
                {
                    "name": name,
                    "ok": not bad,
                    "detail": detail,
                    "seconds": max(res["seconds"] for res in results.values()),
                }
            )
        bw = per_rank["bandwidth"]
        slowest = max(bw.values(), key=lambda b: b.get("all_reduce_s", 0))
        rep["bandwidth"] = {
            "size_mb": size_mb,
            "iters": iters,
            "per_rank": bw,
            "busbw_gbps": slowest.get("busbw_gbps"),
            "algbw_gbps": slowest.get("algbw_gbps"),
        }
        problems += slow_problems(infos, bw, args.slow_factor)
        rep["problems"] = problems
        rep["ok"] = not problems
        emit(rep, args.json)
        status = 0 if rep["ok"] else 1
    # Everyone gets the exit status, and no rank leaves while rank 0 may still read the store.
    verdict = torch.tensor([status], device=device)
    enter("teardown")
    dist.broadcast(verdict, src=0)
    watchdog.disarm()
    watchdog.stop.set()
    status = int(verdict.item())
    dist.destroy_process_group()
    return status


def run() -> None:
    try:
        code = main()
    except UsageError as e:
        prefix = (
            f"[rank {os.environ['RANK']}] " if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
        )
        print(f"{prefix}error: {e}", file=sys.stderr, flush=True)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    run()
