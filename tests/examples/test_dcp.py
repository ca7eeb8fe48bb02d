"""DCP example: reshard 2 -> 1 -> 2 ranks with bit-identical model and optimizer state,
an async save, and a full safetensors export for a non-distributed consumer."""

import pytest
import torch
from example_helpers import (
    assert_one_line_error,
    read_safetensors,
    reference_lm,
    run_in_process,
    run_skill_launch,
    run_torchrun,
    tolerance,
)

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

# Below the gradient norms (0.7-1.3), so clipping acts and is part of what must round-trip.
CLIP = ["--max-norm", "0.1"]


def test_dcp_reshard_round_trip(tmp_path, device):
    a, b, c = (str(tmp_path / n) for n in "abc")
    export = tmp_path / "model.safetensors"

    sa = (
        run_torchrun("dcp_checkpoint.py", 2, ["--steps", "3", "--save", a, *CLIP], device=device)
        .check()
        .summary
    )
    # The one-rank runs need no interpreter of their own (see run_in_process).
    sb = (
        run_in_process(
            "dcp_checkpoint.py", ["--load", a, "--steps", "2", "--save", b, *CLIP], device=device
        )
        .check()
        .summary
    )
    sc = (
        run_torchrun(
            "dcp_checkpoint.py",
            2,
            [
                "--load",
                b,
                "--steps",
                "4",
                "--save",
                c,
                "--async-save",
                "--export-full",
                str(export),
                *CLIP,
            ],
            device=device,
        )
        .check()
        .summary
    )
    sd = (
        run_in_process("dcp_checkpoint.py", ["--load", c, "--steps", "1", *CLIP], device=device)
        .check()
        .summary
    )

    assert (sa["world_size"], sb["world_size"], sc["world_size"]) == (2, 1, 2)
    assert (sb["start_step"], sc["start_step"], sd["start_step"]) == (3, 5, 7)
    # Gathered model + optimizer state, hashed: resharding changes no bit.
    assert sb["loaded_digest"] == sa["saved_digest"]
    assert sc["loaded_digest"] == sb["saved_digest"]
    # The async save (taken after step 6) is what the next run loads, even
    # though training went on while it was written.
    assert sc["saved_next_step"] == 7
    assert sd["loaded_digest"] == sc["saved_digest"]
    assert sc["saved_digest"] != sc["final_digest"]

    # Same trajectory as one process that never stopped: 3 steps on the data of
    # 2 ranks, 2 on that of 1 rank, 4 on that of 2 ranks.
    ra, model, opt = reference_lm(3, 2, max_norm=0.1)
    rb, model, opt = reference_lm(2, 1, start_step=3, model=model, opt=opt, max_norm=0.1)
    rc, model, opt = reference_lm(4, 2, start_step=5, model=model, opt=opt, max_norm=0.1)
    tol = tolerance(device)
    assert sa["losses"] == pytest.approx(ra, **tol)
    assert sb["losses"] == pytest.approx(rb, **tol)
    assert sc["losses"] == pytest.approx(rc, **tol)

    exported = read_safetensors(export)
    ref = model.state_dict()
    assert sorted(exported) == sorted(ref)
    for k, v in ref.items():
        torch.testing.assert_close(torch.from_numpy(exported[k].copy()), v, rtol=1e-4, atol=1e-5)
    assert not list(tmp_path.glob("*.tmp*"))


def test_dcp_load_missing_checkpoint(tmp_path):
    res = run_in_process("dcp_checkpoint.py", ["--load", str(tmp_path / "nope")])
    assert_one_line_error(res, "not a DCP checkpoint")
    assert res.returncode == 2


def test_dcp_skill_command_matches_reference(tmp_path):
    """SKILL.md's command as written: 3 steps and no checkpoint, as one process would train."""
    s = run_skill_launch("dcp_checkpoint.py", tmp_path).summary
    assert (s["device"], s["steps"], s["start_step"], s["saved_digest"]) == ("cpu", 3, 0, None)
    assert s["losses"] == pytest.approx(reference_lm(3, 2)[0], rel=1e-5, abs=1e-5)
