"""HSDP and TP+FSDP examples on 2 ranks (1x2 mesh) and 4 ranks (2x2 mesh):
losses equal a single process, every local shard equals the same slice of a
replicated reference, and a mesh that does not fit the world size is a one-line error."""

import pytest
from example_helpers import (
    CUDA_GPUS,
    Run,
    assert_one_line_error,
    reference_lm,
    run_in_process,
    run_many,
    run_skill_launch,
    run_torchrun,
    selected_tests,
    tolerance,
)

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

STEPS = 4
# Below every gradient norm here (0.7-1.3), so clipping acts on each step; at 1.0 it would
# not, and a norm taken from local shards only (the bug clipping tests exist for) would pass.
MAX_NORM = 0.1
# script, world size -> (mesh dims, dp world size); defaults fit the world size.
CASES = {
    ("hsdp_train.py", 2): ({"dp_replicate": 1, "dp_shard": 2}, 2),
    ("hsdp_train.py", 4): ({"dp_replicate": 2, "dp_shard": 2}, 4),
    ("tp_fsdp_train.py", 2): ({"dp": 1, "tp": 2}, 1),
    ("tp_fsdp_train.py", 4): ({"dp": 2, "tp": 2}, 2),
}


ARGS = ["--steps", str(STEPS), "--check-parity", "--max-norm", str(MAX_NORM)]


MISMATCH = "test_2d_mesh_mismatch_is_one_line_error"


@pytest.fixture(scope="module")
def cpu_runs(request):
    """{(script, world) or MISMATCH: Result} of the selected CPU runs, one launch per world
    size (run_many), which saves a torchrun launch of 2 and one of 4 ranks, and the 2-rank
    one also ends with the mismatched mesh, which ends the launch."""
    wanted = selected_tests(request)
    out = {}
    for world in (2, 4):
        cases = [
            c for c in CASES if c[1] == world and f"test_2d_parity_cpu[{c[0]}-{c[1]}]" in wanted
        ]
        runs = [Run(script, ARGS) for script, _ in cases]
        if world == 2 and MISMATCH in wanted:
            cases.append(MISMATCH)
            runs.append(Run("hsdp_train.py", ["--shard-degree", "4"]))
        out.update(zip(cases, run_many(runs, world)))
    return out


def _check(res, script, world, device):
    s = res.check().summary
    mesh, dp_world = CASES[(script, world)]
    assert s["world_size"] == world and s["mesh"] == mesh
    assert s["losses"] == pytest.approx(
        reference_lm(STEPS, dp_world, max_norm=MAX_NORM)[0], **tolerance(device)
    )
    assert min(s["grad_norms"]) > MAX_NORM
    assert s["losses"] != pytest.approx(
        reference_lm(STEPS, dp_world, max_norm=None)[0], rel=1e-5, abs=1e-5
    )
    assert s["parity"]["grad"] < 1e-5
    assert s["parity"]["param"] < 5e-5
    return s


@pytest.mark.parametrize("script,world", list(CASES))
def test_2d_parity_cpu(script, world, cpu_runs):
    s = _check(cpu_runs[(script, world)], script, world, "cpu")
    if script == "tp_fsdp_train.py":
        # wq: rows split over tp, then over dp (a strided shard on the first dim).
        assert s["wq_local_shape"] == [32 // world, 32]


@pytest.mark.cuda
@pytest.mark.parametrize("script,world", list(CASES))
def test_2d_parity_cuda(script, world):
    if CUDA_GPUS < world:
        pytest.skip(f"needs {world} CUDA GPUs")
    _check(run_torchrun(script, world, ARGS, device="cuda"), script, world, "cuda")


def _check_skill_run(res, mesh, dp_world):
    """SKILL.md's command as written: the default mesh for 2 ranks, 5 steps, clipping at 1.0."""
    s = res.summary
    assert (s["device"], s["mesh"], s["steps"]) == ("cpu", mesh, 5)
    assert s["losses"] == pytest.approx(reference_lm(5, dp_world)[0], rel=1e-5, abs=1e-5)


def test_hsdp_skill_command_matches_reference(tmp_path):
    res = run_skill_launch("hsdp_train.py", tmp_path)
    _check_skill_run(res, {"dp_replicate": 1, "dp_shard": 2}, 2)


def test_tp_fsdp_skill_command_matches_reference(tmp_path):
    res = run_skill_launch("tp_fsdp_train.py", tmp_path)
    _check_skill_run(res, {"dp": 1, "tp": 2}, 1)


def test_2d_mesh_mismatch_is_one_line_error(cpu_runs):
    res = cpu_runs[MISMATCH]
    assert_one_line_error(res, "dp_replicate=1 x dp_shard=4 needs 4 ranks, but the world size is 2")


def test_2d_mesh_mismatch_is_one_line_error_tp():
    """The check runs before any process group, on the world size torchrun announces: the
    rank's own code path, in this process (the launch above shows torchrun's side)."""
    res = run_in_process(
        "tp_fsdp_train.py",
        ["--dp-degree", "2", "--tp-degree", "2"],
        env={"WORLD_SIZE": "2", "RANK": "1"},
    )
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(
        "[rank 1] error: dp=2 x tp=2 needs 4 ranks, but the world size is 2"
    )
