"""The one-GPU check (run.sh / run_gpu.py) on a CPU machine, so it cannot rot unnoticed:
every command it would run parses, its table and exit code work with the GPU steps
stubbed, its checks reject what they must, and the benchmark's worker runs on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import run_gpu  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


@pytest.mark.slow
def test_cpu_dry_run_checks_every_step():
    out = subprocess.run(
        ["bash", str(HERE / "run.sh"), "--cpu-dry-run"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    names = run_gpu.all_steps(Path("/nonexistent"))
    for step in names:
        assert f"{step.name}  " in out.stdout and "DRY" in out.stdout, step.name
    assert "0 failed" in out.stdout


def test_dry_run_catches_a_renamed_flag(monkeypatch, capsys):
    steps = run_gpu.example_steps(Path("/tmp"))
    bad = next(s for s in steps if s.name == "fsdp2_train --cpu-offload")
    bad.parse_script = ("fsdp2_train", ["--cpu-ofload"])
    with pytest.raises(run_gpu.StepFailed, match="rejects"):
        run_gpu.dry_check(bad)


def test_table_and_exit_code_with_gpu_steps_stubbed(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    outcomes = {"ddp_train": ("PASS", "ok"), "join_uneven": ("FAIL", "boom")}
    monkeypatch.setattr(run_gpu, "run_step", lambda step, tmp: outcomes[step.name])
    assert run_gpu.main(["--only", "ddp_train"]) == 0
    assert run_gpu.main(["--only", "ddp_train", "--only", "join_uneven"]) == 1
    out = capsys.readouterr().out
    assert "join_uneven" in out and "FAIL" in out and "1 passed, 1 failed, 0 skipped" in out
    # Past the time budget the remaining steps are skipped, and that fails the run too.
    monkeypatch.setattr(run_gpu, "BUDGET_S", -1)
    assert run_gpu.main(["--only", "ddp_train"]) == 1
    assert "past the" in capsys.readouterr().out
    # The dry run's stubbed failure also gives a non-zero exit.
    assert run_gpu.main(["--cpu-dry-run", "--only", "ddp_train", "--dry-fail", "ddp_train"]) == 1


def test_no_gpu_is_one_line(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_gpu.main(["--only", "ddp_train"]) == 2
    assert capsys.readouterr().err.startswith("error: no CUDA GPU visible")


def _summary(**over) -> dict:
    s = {
        "device": "cuda",
        "backend": "nccl",
        "world_size": 1,
        "peak_mem_allocated_bytes": [10],
        "peak_mem_reserved_bytes": [20],
        "cpu_offload": True,
        "pg_backend": "cuda:nccl,cpu:gloo",
        "losses": [4.0, 3.0],
        "fp32_precision": {"cuda_matmul": "ieee"},
        "parity": {"grad": 0.0, "param": 0.0},
        "grad_norms": [1.0, 0.9],
    }
    s.update(over)
    return s


@pytest.mark.parametrize(
    "check,over,needle",
    [
        (run_gpu.check_offload, {"pg_backend": "nccl"}, "process group backend nccl"),
        (run_gpu.check_offload, {"losses": [3.0, 3.5]}, "did not fall"),
        (run_gpu.check_parity, {"fp32_precision": {"cuda_matmul": "tf32"}}, "TF32 left on"),
        (run_gpu.check_parity, {"parity": {"grad": 1e-3, "param": 0.0}}, "parity"),
    ],
)
def test_checks_reject_what_they_must(check, over, needle):
    with pytest.raises(run_gpu.StepFailed, match=needle):
        check(None, _summary(**over))
    run_gpu.cuda_basics(_summary(**over))


@pytest.mark.parametrize(
    "over,needle",
    [
        ({"device": "cpu"}, "device cpu"),
        ({"peak_mem_allocated_bytes": None}, "no peak memory"),
        ({"peak_mem_allocated_bytes": [30]}, "allocated"),
    ],
)
def test_cuda_basics_rejects(over, needle):
    with pytest.raises(run_gpu.StepFailed, match=needle):
        run_gpu.cuda_basics(_summary(**over))


@pytest.mark.slow
def test_benchmark_worker_runs_on_cpu(tmp_path):
    """Every CPU-capable row of the benchmark, tiny, world size 1: the code run.sh times on a GPU."""
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable,
        str(ROOT / "tests/benchmarks/bench_examples.py"),
        "--device",
        "cpu",
        "--worlds",
        "1",
        "--dim",
        "32",
        "--layers",
        "1",
        "--heads",
        "4",
        "--seq",
        "16",
        "--vocab",
        "64",
        "--batch-size",
        "2",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--peak-tflops",
        "0.1",
        "--json-out",
        str(out),
    ]
    res = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rec = json.loads(out.read_text())
    (row,) = rec["rows"]
    assert set(row["results"]) == {
        "plain",
        "ddp",
        "fsdp2",
        "fsdp2_bf16",
        "fsdp2_ac",
        "fsdp2_no_reshard",
        "fsdp2_fp32",
    }
    assert all(r["tokens_per_s"] > 0 and r["mfu"] > 0 for r in row["results"].values())
    # torchtitan's MFU numerator: embeddings excluded.
    assert (
        rec["config"]["flops_per_token"]
        == 6 * rec["config"]["n_params_non_embedding"] + 12 * 1 * 32 * 16
    )
