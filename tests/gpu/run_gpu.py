#!/usr/bin/env python
"""Everything that needs a CUDA GPU, on ONE GPU, in one go (tests/gpu/run.sh runs this).

    tests/gpu/run.sh                  # on a machine with a CUDA GPU: under 8 minutes on an H200
    tests/gpu/run.sh --only fsdp2     # the steps whose name contains "fsdp2"
    tests/gpu/run.sh --list           # the steps, nothing run
    tests/gpu/run.sh --cpu-dry-run    # no GPU: every step's command checked, none run

Steps, each with its own time limit:
- every example at world size 1 on CUDA with NCCL, in its default GPU configuration
  (FSDP2: bf16 parameters, AC, prefetch; also with --cpu-offload, and the fp32 parity
  check with TF32 enabled by the environment), checked on its JSON summary (device,
  backend, peak memory, resolved precision) and, through tests/examples/probe.py, on
  the effects of bf16 and AC; losses against the CPU reference at 1e-4;
- the CUDA-marked pytest tests (those that need 2 or more GPUs skip, with the reason);
- the guide code blocks marked ``cuda`` (tests/gpu/run_cuda_blocks.py);
- the error-catalog reproductions marked device="cuda", matched against the catalog;
- the benchmark at world size 1, every row.

It prints one table (step, PASS/FAIL/SKIP, seconds, note) and exits 1 if any step failed.
``--cpu-dry-run`` is what the CPU test suite runs (tests/gpu/test_run_gpu.py): each
example command goes through the script's own argument parser and torchrun's, the
benchmark's flags through its parser, pytest collects the CUDA tests, the CUDA blocks
and repros are found; then the table is built from stubbed outcomes (``--dry-fail NAME``
stubs a failure, to show the exit code).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
HERE = Path(__file__).resolve().parent
PY = sys.executable
BUDGET_S = 8 * 60


class StepFailed(Exception):
    pass


def need(cond: bool, msg: str) -> None:
    if not cond:
        raise StepFailed(msg)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    tmp: Path

    def summary(self) -> dict:
        for line in reversed(self.stdout.splitlines()):
            if line.startswith("{") and '"script"' in line:
                return json.loads(line)
        raise StepFailed("no JSON summary; " + tail(self))

    def probes(self) -> list[dict]:
        files = sorted((self.tmp / "probe").glob("rank*.json"))
        need(bool(files), "no probe records")
        return [json.loads(f.read_text()) for f in files]


def tail(r: Run) -> str:
    lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
    err = [ln for ln in lines if "Error" in ln or "error:" in ln]
    return (err[-1] if err else lines[-1] if lines else "no output")[:300]


@dataclass
class Step:
    name: str
    cmd: list[str]
    check: Callable[[Run], str] = lambda r: ""
    timeout: int = 120
    env: dict = field(default_factory=dict)
    # For the dry run: (script stem, its args) to parse, torchrun's own args, or the benchmark's.
    parse_script: tuple[str, list[str]] | None = None
    parse_torchrun: list[str] | None = None
    parse_bench: list[str] | None = None
    dry: Callable[[], str] | None = None


# --------------------------------------------------------------------------- examples


def torchrun(
    script: str, args: list[str], extra_rdzv: list[str] = (), probe: bool = False
) -> list[str]:
    rdzv = ["--standalone", "--nproc-per-node=1", *extra_rdzv]
    target = (
        [str(ROOT / "tests" / "examples" / "probe.py"), Path(script).stem]
        if probe
        else [str(SCRIPTS / script)]
    )
    return [PY, "-m", "torch.distributed.run", *rdzv, *target, "--device", "cuda", *args]


def example(
    name: str,
    script: str,
    args: list[str],
    check: Callable[[Run, dict], str],
    *,
    probe: bool = False,
    extra_rdzv: list[str] = (),
    env: dict | None = None,
    timeout: int = 120,
) -> Step:
    def run_check(r: Run) -> str:
        need(r.returncode == 0, f"exit {r.returncode}: {tail(r)}")
        s = r.summary()
        cuda_basics(s)
        return check(r, s) or ""

    return Step(
        name,
        torchrun(script, args, extra_rdzv, probe),
        run_check,
        timeout,
        env or {},
        parse_script=(Path(script).stem, args),
        parse_torchrun=["--standalone", "--nproc-per-node=1", *extra_rdzv, str(SCRIPTS / script)],
    )


def cuda_basics(s: dict) -> None:
    need(s["device"] == "cuda", f"device {s['device']}")
    need(s["backend"] == "nccl", f"backend {s['backend']}")
    alloc, resv = s.get("peak_mem_allocated_bytes"), s.get("peak_mem_reserved_bytes")
    need(
        bool(alloc) and bool(resv) and len(alloc) == s["world_size"],
        "no peak memory in the summary",
    )
    need(
        all(0 < a <= r for a, r in zip(alloc, resv)),
        f"peak memory allocated {alloc} reserved {resv}",
    )


def mib(s: dict) -> str:
    return f"peak {max(s['peak_mem_allocated_bytes']) / 2**20:.0f}/{max(s['peak_mem_reserved_bytes']) / 2**20:.0f} MiB"


def finite_and_falling(losses: list[float]) -> None:
    need(all(math.isfinite(v) for v in losses), f"losses {losses}")
    need(losses[-1] < losses[0], f"loss did not fall: {losses}")


def cpu_reference(steps: int, **kw) -> list[float]:
    sys.path.insert(0, str(ROOT / "tests" / "examples"))
    from example_helpers import reference_lm

    return reference_lm(steps, 1, **kw)[0]


def close(a: list[float], b: list[float], rel: float = 1e-4) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= rel * max(1.0, abs(y)) for x, y in zip(a, b))


def check_fsdp2_default(r: Run, s: dict) -> str:
    need(
        (s["mixed_precision"], s["param_dtype"], s["reduce_dtype"])
        == ("bf16", "bfloat16", "float32"),
        f"precision {s['mixed_precision']} {s['param_dtype']} {s['reduce_dtype']}",
    )
    need(s["ac"] and s["prefetch"] and s["reshard_after_forward"], "not the default configuration")
    finite_and_falling(s["losses"])
    (p,) = r.probes()
    need(p["param_dtype"] == ["bfloat16"], f"weights in forward: {p['param_dtype']}")
    st = p["steps"][0]
    need(
        st["forward:layers.0"] == 2 * s["accum_steps"],
        f"AC: {st['forward:layers.0']} block forwards per step",
    )
    order = p["order"]
    need(order.index("ag:layers.1") < order.index("fwd:layers.0"), "no forward prefetch")
    # bf16 really changes the numbers: the fp32 reference differs.
    ref = cpu_reference(len(s["losses"]), accum=s["accum_steps"])
    need(not close(s["losses"], ref, 1e-5), "bf16 losses equal the fp32 reference")
    return f"bf16 in forward, AC x2, prefetch; {mib(s)}"


def check_offload(r: Run, s: dict) -> str:
    need(s["cpu_offload"], "no offload")
    need(s["pg_backend"] == "cuda:nccl,cpu:gloo", f"process group backend {s['pg_backend']}")
    finite_and_falling(s["losses"])
    return f"{s['pg_backend']}; {mib(s)}"


def check_parity(r: Run, s: dict) -> str:
    need(s["fp32_precision"]["cuda_matmul"] == "ieee", f"TF32 left on: {s['fp32_precision']}")
    need(s["parity"]["grad"] < 1e-5 and s["parity"]["param"] < 1e-5, f"parity {s['parity']}")
    ref = cpu_reference(len(s["losses"]), max_norm=0.1)
    need(close(s["losses"], ref), f"losses {s['losses']} vs CPU reference {ref}")
    need(min(s["grad_norms"]) > 0.1, "clipping did not act")
    return f"parity {s['parity']['param']:.1e}, TF32 off despite the environment"


def check_fsdp1(r: Run, s: dict) -> str:
    import torch

    need(s["mixed_precision"] == "bf16", f"mixed precision {s['mixed_precision']}")
    finite_and_falling(s["losses"])
    sd = torch.load(r.tmp / "fsdp1_full.pt", weights_only=True)
    need(sorted(sd) == s["full_keys"], "saved keys differ")
    need(all(v.device.type == "cpu" for v in sd.values()), "full state dict not on the CPU")
    return mib(s)


def check_dcp_save(r: Run, s: dict) -> str:
    need(s["saved_digest"] and s["saved_next_step"] == 2, "no save")
    need((r.tmp / "dcp_model.safetensors").is_file(), "no export")
    (r.tmp / "dcp_save.json").write_text(json.dumps(s))
    return mib(s)


def check_dcp_load(r: Run, s: dict) -> str:
    saved = json.loads((r.tmp / "dcp_save.json").read_text())
    need(s["start_step"] == 2, f"start step {s['start_step']}")
    need(s["loaded_digest"] == saved["saved_digest"], "loaded state differs from the saved one")
    return "digest round trip"


def check_2d(r: Run, s: dict) -> str:
    need(s["parity"]["grad"] < 1e-5 and s["parity"]["param"] < 5e-5, f"parity {s['parity']}")
    return f"parity {s['parity']['param']:.1e}"


def check_elastic_killed(r: Run, s: dict) -> str:
    need("injected failure" in r.stdout, "no failure was injected")
    need(
        s["launch"] == 2 and s["start_step"] == 3, f"launch {s['launch']}, start {s['start_step']}"
    )
    # Bitwise only on CPU (CUDA attention backward is not deterministic): every step once,
    # so the history equals the uninterrupted CPU reference at CUDA's tolerance.
    ref = cpu_reference(len(s["losses"]))
    need(close(s["losses"], ref), f"resumed losses {s['losses']} vs CPU reference {ref}")
    return f"resumed at step 3 after a kill; losses match; {mib(s)}"


def check_ddp(r: Run, s: dict) -> str:
    finite_and_falling(s["losses"])
    return mib(s)


def check_compile(r: Run, s: dict) -> str:
    # The CPU tests compile with aot_eager; inductor's code generation is checked here.
    sys.path.insert(0, str(ROOT / "tests" / "examples"))
    from example_helpers import compiled

    need(s["compile"] and s["compile_backend"] == "inductor", "not compiled with inductor")
    g = s["compiled_graphs"]
    need(compiled(s), f"compiled graphs per step {g}: none, or recompiles")
    finite_and_falling(s["losses"])
    return f"{g[0]} graphs, no recompiles; {mib(s)}"


def check_join(r: Run, s: dict) -> str:
    need(s["steps_per_rank"] == s["batches_per_rank"], "steps do not match the batches")
    return mib(s)


def example_steps(tmp: Path) -> list[Step]:
    ck = tmp / "ckpt"
    return [
        example("ddp_train", "ddp_train.py", ["--steps", "8"], check_ddp),
        example("join_uneven", "join_uneven.py", [], check_join),
        example(
            "fsdp2_train default",
            "fsdp2_train.py",
            ["--steps", "6", "--accum-steps", "2"],
            check_fsdp2_default,
            probe=True,
        ),
        example(
            "fsdp2_train --cpu-offload",
            "fsdp2_train.py",
            ["--steps", "6", "--accum-steps", "2", "--cpu-offload"],
            check_offload,
        ),
        example(
            "fsdp2_train --check-parity",
            "fsdp2_train.py",
            ["--steps", "5", "--mixed-precision", "off", "--check-parity", "--max-norm", "0.1"],
            check_parity,
            probe=True,
            env={"PROBE_TF32": "1"},
        ),
        example(
            "fsdp1_train default",
            "fsdp1_train.py",
            ["--steps", "6", "--save-full", str(tmp / "fsdp1_full.pt")],
            check_fsdp1,
        ),
        example(
            "dcp_checkpoint save",
            "dcp_checkpoint.py",
            [
                "--steps",
                "4",
                "--save",
                str(ck / "dcp"),
                "--async-save",
                "--export-full",
                str(tmp / "dcp_model.safetensors"),
            ],
            check_dcp_save,
        ),
        example(
            "dcp_checkpoint load",
            "dcp_checkpoint.py",
            ["--load", str(ck / "dcp"), "--steps", "1"],
            check_dcp_load,
        ),
        example(
            "fsdp2_compile inductor",
            "fsdp2_compile.py",
            ["--steps", "4"],
            check_compile,
            timeout=300,
        ),
        example("hsdp_train --check-parity", "hsdp_train.py", ["--check-parity"], check_2d),
        example("tp_fsdp_train --check-parity", "tp_fsdp_train.py", ["--check-parity"], check_2d),
        example(
            "elastic_resume killed",
            "elastic_resume.py",
            ["--ckpt-dir", str(ck / "el_kill"), "--fail-at-step", "4", "--fail-rank", "0"],
            check_elastic_killed,
            extra_rdzv=["--max-restarts=1"],
            timeout=180,
        ),
    ]


# --------------------------------------------------------------------------- the rest


def pytest_step() -> Step:
    def check(r: Run) -> str:
        last = next(
            (ln for ln in reversed(r.stdout.splitlines()) if " in " in ln and "=" in ln), ""
        )
        need(
            r.returncode in (0, 5), f"pytest exit {r.returncode}: {last or tail(r)}"
        )  # 5: none selected
        return last.strip("= ")

    def dry() -> str:
        out = subprocess.run(
            [
                PY,
                "-m",
                "pytest",
                "--collect-only",
                "-q",
                "-m",
                "cuda",
                "-p",
                "no:cacheprovider",
                "tests/examples",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        need(out.returncode == 0, f"collection failed: {out.stdout[-500:]}")
        n = sum(1 for ln in out.stdout.splitlines() if "::" in ln)
        need(n > 0, "no CUDA-marked tests collected")
        return f"{n} CUDA tests collected"

    return Step(
        "pytest -m cuda",
        [PY, "-m", "pytest", "-q", "-ra", "-m", "cuda", "-p", "no:cacheprovider", "tests/examples"],
        check,
        timeout=240,
        dry=dry,
    )


def blocks_step() -> Step:
    def check(r: Run) -> str:
        need(r.returncode == 0, tail(r))
        return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""

    def dry() -> str:
        out = subprocess.run(
            [PY, str(HERE / "run_cuda_blocks.py"), "--list"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        need(out.returncode == 0, tail(Run(out.returncode, out.stdout, out.stderr, Path("."))))
        return out.stdout.strip().splitlines()[-1]

    return Step(
        "guide blocks (cuda)", [PY, str(HERE / "run_cuda_blocks.py")], check, timeout=240, dry=dry
    )


def cuda_repros() -> list:
    sys.path.insert(0, str(ROOT / "tests" / "errors"))
    import catalog
    import errors_harness

    entries = {e.id: e for e in catalog.load()}
    repros = [
        r
        for r in errors_harness.load_all(str(ROOT / "tests" / "errors")).values()
        if r.device == "cuda"
    ]
    for r in repros:
        need(
            r.id in entries and entries[r.id].repro == "cuda",
            f"repro {r.id} has no `repro: cuda` entry",
        )
    return [(r, entries[r.id]) for r in repros]


def errors_step(tmp: Path) -> Step:
    # One harness process per (module, world); world 1 only here, one GPU.
    def check(r: Run) -> str:
        import catalog

        found, bad, skipped = 0, [], []
        for repro, entry in cuda_repros():
            if repro.world > 1:
                skipped.append(f"{repro.id} (needs {repro.world} GPUs)")
                continue
            got = tmp / "errors" / repro.module / "rank0.json"
            results = json.loads(got.read_text()) if got.is_file() else {}
            text = results.get(repro.id, {}).get("text", "(no result)")
            found += 1
            if not catalog.matches(entry.message, text):
                bad.append(f"{repro.id}: {text[:200]}")
        need(not bad, "; ".join(bad))
        return f"{found} repro(s) print the catalogued message" + (
            f"; skipped {', '.join(skipped)}" if skipped else ""
        )

    modules = sorted({r.module for r, _ in cuda_repros() if r.world == 1})
    script = (
        " && ".join(
            f"{PY} {ROOT / 'tests/errors/errors_harness.py'} {m} {tmp / 'errors' / m} --world 1 --device cuda"
            for m in modules
        )
        or "true"
    )
    return Step(
        "error repros (cuda)",
        ["bash", "-c", f"cd {ROOT / 'tests/errors'} && {script}"],
        check,
        timeout=180,
        dry=lambda: f"{len(cuda_repros())} CUDA repro(s) with catalog entries",
    )


BENCH_ARGS = [
    "--device",
    "cuda",
    "--worlds",
    "1",
    "--preset",
    "200m",
    "--steps",
    "10",
    "--warmup",
    "3",
]


def bench_step(tmp: Path) -> Step:
    out = tmp / "bench.json"

    def check(r: Run) -> str:
        need(out.is_file(), f"no benchmark JSON: {tail(r)}")
        rec = json.loads(out.read_text())
        need(rec["rows"] and not rec["failed"], f"failed: {rec['failed']}")
        res = rec["rows"][0]["results"]
        errors = {k: v["error"] for k, v in res.items() if "error" in v}
        need(not errors, f"rows failed: {errors}")
        need(set(res) == set(rec["config"]["kinds"]), f"rows {sorted(res)}")
        need(
            all(v["peak_reserved_bytes"] >= v["peak_allocated_bytes"] > 0 for v in res.values()),
            "memory",
        )
        need(r.returncode == 0, f"exit {r.returncode}")
        best = max(res, key=lambda k: res[k]["tokens_per_s"])
        return f"{len(res)} rows; fastest {best} {res[best]['tokens_per_s']:,.0f} tok/s"

    args = [*BENCH_ARGS, "--json-out", str(out)]
    return Step(
        "benchmark (1 GPU)",
        [PY, str(ROOT / "tests/benchmarks/bench_examples.py"), *args],
        check,
        timeout=300,
        parse_bench=args,
    )


def all_steps(tmp: Path) -> list[Step]:
    return [*example_steps(tmp), pytest_step(), blocks_step(), errors_step(tmp), bench_step(tmp)]


# --------------------------------------------------------------------------- running


def run_step(step: Step, tmp: Path) -> tuple[str, str]:
    (tmp / "probe").mkdir(exist_ok=True)
    for f in (tmp / "probe").glob("*.json"):
        f.unlink()
    env = dict(os.environ, PYTHONUNBUFFERED="1", PROBE_OUT=str(tmp / "probe"), **step.env)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    try:
        out = subprocess.run(
            step.cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=step.timeout
        )
    except subprocess.TimeoutExpired as e:
        return "FAIL", f"timed out after {step.timeout}s: {str(e.stderr or '')[-200:]}"
    try:
        return "PASS", step.check(Run(out.returncode, out.stdout, out.stderr, tmp))
    except StepFailed as e:
        return "FAIL", str(e)
    except Exception as e:  # noqa: BLE001 - a broken check is a failed step, not a crashed run
        return "FAIL", f"check raised {type(e).__name__}: {e}"


class _Parsed(Exception):
    pass


def dry_check(step: Step) -> str:
    """Validate the step's command without a GPU."""
    notes = []
    if step.parse_script:
        stem, args = step.parse_script
        if str(SCRIPTS) not in sys.path:
            sys.path.insert(0, str(SCRIPTS))
        import importlib

        mod = importlib.import_module(stem)

        def stop(*_a, **_k):
            raise _Parsed

        # Scripts on the shared helpers start with common.distributed; the flat, copyable
        # ones (fsdp2_compile, fsdp2_load_pretrained) with their own init_distributed.
        owner, attr = (
            (mod.common, "distributed") if hasattr(mod, "common") else (mod, "init_distributed")
        )
        saved = getattr(owner, attr)
        setattr(owner, attr, stop)
        try:
            with contextlib.redirect_stderr(sys.stdout):
                mod.main(["--device", "cuda", *args])
        except _Parsed:
            notes.append("flags parse")
        except SystemExit as e:
            raise StepFailed(f"{stem} rejects {args}: exit {e.code}") from None
        except Exception as e:  # a LaunchError before distributed(): a bad flag combination
            raise StepFailed(f"{stem} {args}: {e}") from None
        finally:
            setattr(owner, attr, saved)
    if step.parse_torchrun:
        from torch.distributed.run import get_args_parser

        try:
            get_args_parser().parse_args(step.parse_torchrun)
        except SystemExit:
            raise StepFailed(f"torchrun rejects {step.parse_torchrun}") from None
    if step.parse_bench:
        sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
        import bench_examples

        try:
            bench_examples.build_parser().parse_args(step.parse_bench)
        except SystemExit:
            raise StepFailed(f"the benchmark rejects {step.parse_bench}") from None
        notes.append("flags parse")
    if step.dry:
        notes.append(step.dry())
    return "; ".join(notes)


def table(rows: list[tuple[str, str, float, str]]) -> str:
    w = max(len(r[0]) for r in rows)
    out = [f"{'step':<{w}}  result  {'s':>6}  note", "-" * (w + 24)]
    out += [f"{name:<{w}}  {res:<6}  {sec:>6.1f}  {note}" for name, res, sec, note in rows]
    passed = sum(r[1] in ("PASS", "DRY") for r in rows)
    failed = sum(r[1] == "FAIL" for r in rows)
    out.append(
        f"{passed} passed, {failed} failed, {len(rows) - passed - failed} skipped, "
        f"{sum(r[2] for r in rows):.0f} s"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--cpu-dry-run", action="store_true", help="check every step's command; run none"
    )
    p.add_argument(
        "--dry-fail",
        metavar="NAME",
        action="append",
        default=[],
        help="with --cpu-dry-run: stub this step as failed",
    )
    p.add_argument(
        "--only", metavar="TEXT", action="append", default=[], help="steps whose name contains TEXT"
    )
    p.add_argument("--list", action="store_true", help="print the steps and exit")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpu-run-") as t:
        tmp = Path(t)
        steps = all_steps(tmp)
        if args.only:
            steps = [s for s in steps if any(o in s.name for o in args.only)]
        if args.list:
            print("\n".join(s.name for s in steps))
            return 0
        if not args.cpu_dry_run:
            import torch

            if not torch.cuda.is_available():
                print(
                    "error: no CUDA GPU visible (use --cpu-dry-run to check the commands)",
                    file=sys.stderr,
                )
                return 2
        rows, start = [], time.monotonic()
        for step in steps:
            t0 = time.monotonic()
            if args.cpu_dry_run:
                try:
                    note = dry_check(step)
                    res = "FAIL" if step.name in args.dry_fail else "DRY"
                    note = "stubbed failure" if res == "FAIL" else note
                except StepFailed as e:
                    res, note = "FAIL", str(e)
            elif time.monotonic() - start > BUDGET_S:
                res, note = "SKIP", f"past the {BUDGET_S}s budget"
            else:
                res, note = run_step(step, tmp)
            rows.append((step.name, res, time.monotonic() - t0, note))
            print(f"[{res}] {step.name} ({rows[-1][2]:.1f}s) {note}", flush=True)
        print()
        print(table(rows))
        return 1 if any(r[1] in ("FAIL", "SKIP") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
