"""FSDP2 example: loss parity with a single process, per-shard parity in the run, and
every feature checked by its effect (probe.py): activation checkpointing recomputes,
prefetch gathers early, reshard_after_forward gathers twice, accumulation skips
reduce-scatters, clipping clips, bf16 computes in bf16, TF32 is off for parity.
Also: CPU offload's CPU backend (emulated), numpy-free single process, two nodes."""

import pytest
from example_helpers import (
    Run,
    assert_one_line_error,
    finish,
    free_port,
    hidden_numpy_env,
    kill,
    load_script,
    reference_lm,
    run_in_process,
    run_many,
    run_probe,
    run_python,
    run_skill_launch,
    script_args,
    selected_tests,
    start,
    tolerance,
    torchrun_cmd,
)

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

STEPS = 5
ARGS = ["--steps", str(STEPS), "--mixed-precision", "off"]
TOL = dict(rel=1e-5, abs=1e-5)
# Small enough that clipping acts on every step (the norms here are 0.6-1.3).
MAX_NORM = 0.1
BLOCKS = ("layers.0", "layers.1")


def effects(probe: dict, accum: int) -> dict:
    """What each feature changes, per micro-batch, from one rank's probe record."""
    steps = probe["steps"]
    assert len(steps) == STEPS and all(st == steps[0] for st in steps), steps
    st, order = steps[0], probe["order"]
    return {
        # A block's own forward: once, plus once more when AC recomputes it in backward.
        "block_forwards": {st[f"forward:{b}"] / accum for b in BLOCKS},
        # Gathered for forward, and again for backward if resharded after forward.
        "block_gathers": {st[f"all_gather:{b}"] / accum for b in BLOCKS},
        # Per optimizer step and group: 1 when accumulation skips the early micro-batches.
        "reduce_scatters": {st.get(f"reduce_scatter:{g}", 0) for g in (*BLOCKS, "root")},
        # Explicit forward prefetch: block 1's gather is issued before block 0 computes.
        "prefetched": order.index("ag:layers.1") < order.index("fwd:layers.0"),
    }


def bf16_visible(losses: list[float], fp32: list[float]) -> bool:
    """bf16 shifts these losses by 1e-5..1e-3 over 3 steps (fp32 runs: < 1e-6)."""
    gap = max(abs(a - b) for a, b in zip(losses, fp32))
    return 2e-4 < gap < 5e-3


PARITY_ARGS = ARGS + ["--accum-steps", "2", "--check-parity", "--max-norm", str(MAX_NORM)]
# The CPU runs of the tests below, by test; they share one launch (cpu_runs).
CPU_RUNS = {
    # TF32 on, as a user's environment may have it: --check-parity must turn it off.
    "test_fsdp2_parity_two_ranks[cpu]": Run(
        "fsdp2_train.py", PARITY_ARGS, {"PROBE_TF32": "1"}, probe=True
    ),
    # Each feature off, and accumulation broken on purpose by the probe.
    "test_fsdp2_variants_no_ac_no_prefetch_no_reshard": Run(
        "fsdp2_train.py",
        ARGS
        + [
            "--no-ac",
            "--no-prefetch",
            "--no-reshard-after-forward",
            "--accum-steps",
            "2",
            "--max-norm",
            str(MAX_NORM),
        ],
        {"PROBE_TF32": "1", "PROBE_MUTATE": "sync-every-micro"},
        probe=True,
    ),
    "test_fsdp2_bf16_on_cpu_tracks_fp32": Run(
        "fsdp2_train.py", ["--steps", "3", "--mixed-precision", "bf16"], probe=True
    ),
    "test_offload_clip_needs_a_cpu_backend_emulated": Run("offload_clip_emulation.py", []),
}


@pytest.fixture(scope="module")
def cpu_runs(request):
    """{test name: Result} of the selected tests' CPU runs, in one launch (run_many): each
    would otherwise cost a torchrun launch of its own."""
    names = [n for n in CPU_RUNS if n in selected_tests(request)]
    return dict(zip(names, run_many([CPU_RUNS[n] for n in names])))


def test_fsdp2_parity_two_ranks(device, request):
    if device == "cpu":
        res = request.getfixturevalue("cpu_runs")[request.node.name].check()
    else:
        env = {"PROBE_TF32": "1"}
        res = run_probe("fsdp2_train.py", 2, PARITY_ARGS, device=device, env=env).check()
    s = res.summary
    assert s["world_size"] == 2 and s["steps"] == STEPS
    assert s["fp32_precision"]["cuda_matmul"] == "ieee"
    ref, _, _ = reference_lm(STEPS, 2, accum=2, max_norm=MAX_NORM)
    assert s["losses"] == pytest.approx(ref, **tolerance(device))
    # Clipping acted: every norm was above the threshold, and without it the run would differ.
    assert min(s["grad_norms"]) > MAX_NORM
    assert s["losses"] != pytest.approx(reference_lm(STEPS, 2, accum=2, max_norm=None)[0], **TOL)
    # Per-shard comparison against a replicated model trained in the same run.
    assert s["parity"]["grad"] < 1e-5
    assert s["parity"]["param"] < 1e-5
    for probe in res.probes:
        assert effects(probe, accum=2) == {
            "block_forwards": {2.0},
            "block_gathers": {2.0},
            "reduce_scatters": {1},
            "prefetched": True,
        }
        assert probe["param_dtype"] == ["float32"]


def test_fsdp2_variants_no_ac_no_prefetch_no_reshard(cpu_runs, request):
    """The negative of the test above: each feature off (accumulation broken on purpose by
    the probe) changes its effect, yet not one loss, which is why effects are checked."""
    res = cpu_runs[request.node.name]
    s = res.check().summary
    ref = reference_lm(STEPS, 2, accum=2, max_norm=MAX_NORM)[0]
    assert s["losses"] == pytest.approx(ref, **TOL)
    for probe in res.probes:
        assert effects(probe, accum=2) == {
            "block_forwards": {1.0},
            "block_gathers": {1.0},
            "reduce_scatters": {2},
            "prefetched": False,
        }
    # Without --check-parity the run keeps the environment's TF32, and says so.
    assert s["fp32_precision"]["cuda_matmul"] == "tf32"
    # An fp32 run does not pass for bf16.
    assert not bf16_visible(s["losses"], ref)


def test_fsdp2_skill_command_matches_reference(tmp_path):
    """SKILL.md's command as written: the defaults (6 steps, AC, prefetch, clipping at 1.0,
    fp32 on CPU) train as one process would."""
    s = run_skill_launch("fsdp2_train.py", tmp_path).summary
    assert (s["device"], s["mixed_precision"], s["steps"]) == ("cpu", "off", 6)
    assert s["losses"] == pytest.approx(reference_lm(6, 2)[0], **TOL)


def test_fsdp2_bf16_on_cpu_tracks_fp32(cpu_runs, request):
    res = cpu_runs[request.node.name].check()
    s = res.summary
    assert (s["mixed_precision"], s["param_dtype"], s["reduce_dtype"]) == (
        "bf16",
        "bfloat16",
        "float32",
    )
    assert all(p["param_dtype"] == ["bfloat16"] for p in res.probes)
    assert bf16_visible(s["losses"], reference_lm(3, 2)[0])


def test_fsdp2_single_process_without_numpy(tmp_path):
    """Plain python, and no numpy: torch does not install it, and the example needs none."""
    s = (
        run_python("fsdp2_train.py", ARGS + ["--check-parity"], env=hidden_numpy_env(tmp_path))
        .check()
        .summary
    )
    assert s["world_size"] == 1 and s["launch"] == 1
    assert s["losses"] == pytest.approx(reference_lm(STEPS, 1)[0], **TOL)
    assert s["parity"] == {"grad": 0.0, "loss": 0.0, "param": 0.0}


def test_fsdp2_cpu_offload_needs_accelerator():
    res = run_in_process("fsdp2_train.py", ["--cpu-offload"])
    assert_one_line_error(res, "--cpu-offload needs an accelerator")


def test_fsdp2_cpu_offload_asks_for_a_cpu_backend(monkeypatch):
    mod = load_script("fsdp2_train")
    asked = []

    class Stop(Exception):
        pass

    def distributed(args, **kw):
        asked.append(kw.get("cpu_collectives", False))
        raise Stop

    monkeypatch.setattr(mod.common, "distributed", distributed)
    for argv in ([], ["--cpu-offload"]):
        with pytest.raises(Stop):
            mod.main(argv)
    assert asked == [False, True]


def test_offload_clip_needs_a_cpu_backend_emulated(cpu_runs, request):
    """CPU emulation of NCCL + offload (no GPU here): a group whose only backend serves
    another device type, and DTensor gradients in host memory, as CPUOffloadPolicy leaves
    them. Clipping then fails at world size 2; with_cpu_backend's spec fixes it."""
    res = cpu_runs[request.node.name].check()
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("EMULATION ")]
    assert len(lines) == 2, res.stdout[-2000:]
    for ln in lines:
        _, rank, spec, outcome = ln.split(" ", 3)
        assert spec == "cuda:gloo,cpu:gloo", ln
        broken, fixed = outcome.split(" | ")
        assert broken == "error No backend type associated with device type cpu", ln
        word, norm, _, numel = fixed.split()
        # Gradients of ones: the global norm is sqrt(#parameters); one shard's would be less.
        assert word == "norm" and float(norm) == pytest.approx(int(numel) ** 0.5, rel=1e-6), ln


def test_fsdp2_two_nodes_c10d_rendezvous():
    """Two torchrun agents, one process each, meet at a c10d store on 127.0.0.1."""
    port = free_port()
    procs = []
    for _ in range(2):
        # No --node-rank: with c10d the rendezvous assigns ranks (torchrun ignores the flag).
        rdzv = [
            "--nnodes=2",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=fsdp2-two-nodes",
        ]
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
