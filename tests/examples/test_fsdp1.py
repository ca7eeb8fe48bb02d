"""FSDP1 example: losses and the gathered full state dict match a single process."""

import pytest

from example_helpers import reference_lm, run_torchrun

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

STEPS = 4


@pytest.mark.parametrize("strategy", ["FULL_SHARD", "SHARD_GRAD_OP"])
def test_fsdp1_matches_reference(device, strategy):
    args = ["--steps", str(STEPS), "--sharding-strategy", strategy, "--mixed-precision", "off"]
    s = run_torchrun("fsdp1_train.py", 2, args, device=device).check().summary
    ref_losses, ref_model, _ = reference_lm(STEPS, 2)
    assert s["losses"] == pytest.approx(ref_losses, rel=1e-5, abs=1e-5)
    ref_sd = ref_model.state_dict()
    assert s["full_keys"] == sorted(ref_sd)
    for k, v in ref_sd.items():
        assert s["full_sums"][k] == pytest.approx(v.double().sum().item(), rel=1e-4, abs=1e-4), k
    total = sum(v.numel() for v in ref_sd.values())
    # Each rank's sharded state dict holds about half of the model.
    assert total // 2 <= s["sharded_local_numel"] <= total // 2 + 64
