"""FSDP2 example: loss parity with a single process, per-shard parity in the run,
bf16 on CPU, a clear error for CPU offload without an accelerator, and two
torchrun agents as two nodes."""

import pytest

from example_helpers import (assert_one_line_error, finish, free_port, kill, reference_lm, run_python,
                             run_torchrun, script_args, start, torchrun_cmd)

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

STEPS = 5
ARGS = ["--steps", str(STEPS), "--mixed-precision", "off"]
TOL = dict(rel=1e-5, abs=1e-5)


def test_fsdp2_parity_two_ranks(device):
    args = ARGS + ["--accum-steps", "2", "--check-parity"]
    s = run_torchrun("fsdp2_train.py", 2, args, device=device).check().summary
    assert s["world_size"] == 2 and s["steps"] == STEPS and s["ac"] and s["prefetch"]
    ref, _, _ = reference_lm(STEPS, 2, accum=2)
    assert s["losses"] == pytest.approx(ref, **TOL)
    # Per-shard comparison against a replicated model trained in the same run.
    assert s["parity"]["grad"] < 1e-5
    assert s["parity"]["param"] < 1e-5


def test_fsdp2_variants_no_ac_no_prefetch_no_reshard():
    args = ARGS + ["--no-ac", "--no-prefetch", "--no-reshard-after-forward"]
    s = run_torchrun("fsdp2_train.py", 2, args).check().summary
    assert s["losses"] == pytest.approx(reference_lm(STEPS, 2)[0], **TOL)


def test_fsdp2_bf16_on_cpu_tracks_fp32():
    s = run_torchrun("fsdp2_train.py", 2, ["--steps", "3", "--mixed-precision", "bf16"]).check().summary
    assert s["mixed_precision"] == "bf16"
    assert s["losses"] == pytest.approx(reference_lm(3, 2)[0], abs=0.05)


def test_fsdp2_single_process():
    s = run_python("fsdp2_train.py", ARGS + ["--check-parity"]).check().summary
    assert s["world_size"] == 1
    assert s["losses"] == pytest.approx(reference_lm(STEPS, 1)[0], **TOL)
    assert s["parity"] == {"grad": 0.0, "loss": 0.0, "param": 0.0}


def test_fsdp2_cpu_offload_needs_accelerator():
    res = run_python("fsdp2_train.py", ["--cpu-offload"])
    assert_one_line_error(res, "--cpu-offload needs an accelerator")


def test_fsdp2_two_nodes_c10d_rendezvous():
    """Two torchrun agents, one process each, meet at a c10d store on 127.0.0.1."""
    port = free_port()
    procs = []
    for node in range(2):
        rdzv = ["--nnodes=2", f"--node-rank={node}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=fsdp2-two-nodes"]
        procs.append(start(torchrun_cmd("fsdp2_train.py", 1, script_args(ARGS, "cpu"), rdzv)))
    try:
        results = [finish(p) for p in procs]
    finally:
        for p in procs:
            kill(p)
    for r in results:
        r.check()
    # Exactly one agent hosts global rank 0 and prints the summary.
    summaries = [r for r in results if '"script"' in r.stdout]
    assert len(summaries) == 1
    s = summaries[0].summary
    assert s["world_size"] == 2
    assert s["losses"] == pytest.approx(reference_lm(STEPS, 2)[0], **TOL)
