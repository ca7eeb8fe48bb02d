"""HSDP and TP+FSDP examples on 2 ranks (1x2 mesh) and 4 ranks (2x2 mesh):
losses equal a single process, every local shard equals the same slice of a
replicated reference, and a mesh that does not fit the world size is a one-line error."""

import pytest
from example_helpers import CUDA_GPUS, assert_one_line_error, reference_lm, run_torchrun, tolerance

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


def _run(script, world, device):
    args = ["--steps", str(STEPS), "--check-parity", "--max-norm", str(MAX_NORM)]
    s = run_torchrun(script, world, args, device=device).check().summary
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
def test_2d_parity_cpu(script, world):
    s = _run(script, world, "cpu")
    if script == "tp_fsdp_train.py":
        # wq: rows split over tp, then over dp (a strided shard on the first dim).
        assert s["wq_local_shape"] == [32 // world, 32]


@pytest.mark.cuda
@pytest.mark.parametrize("script,world", list(CASES))
def test_2d_parity_cuda(script, world):
    if CUDA_GPUS < world:
        pytest.skip(f"needs {world} CUDA GPUs")
    _run(script, world, "cuda")


@pytest.mark.parametrize(
    "script,flags,needle",
    [
        (
            "hsdp_train.py",
            ["--shard-degree", "4"],
            "dp_replicate=1 x dp_shard=4 needs 4 ranks, but the world size is 2",
        ),
        (
            "tp_fsdp_train.py",
            ["--dp-degree", "2", "--tp-degree", "2"],
            "dp=2 x tp=2 needs 4 ranks, but the world size is 2",
        ),
    ],
)
def test_2d_mesh_mismatch_is_one_line_error(script, flags, needle):
    res = run_torchrun(script, 2, flags, timeout=90)
    assert_one_line_error(res, needle)
