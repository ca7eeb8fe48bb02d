"""Elastic example: one rank is killed mid-run, torchrun restarts the job, and the
final weights and optimizer state equal an uninterrupted run's bit for bit."""

import os

import pytest

from example_helpers import reference_lm, run_torchrun

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

STEPS, EVERY = 8, 3  # checkpoints after steps 2, 5 and 7 (next_step 3, 6, 8)


def _run(ckpt, *extra, restarts=0):
    rdzv = ["--standalone", f"--max-restarts={restarts}"]
    args = ["--ckpt-dir", str(ckpt), "--steps", str(STEPS), "--ckpt-every", str(EVERY), *extra]
    return run_torchrun("elastic_resume.py", 2, args, torchrun_args=rdzv)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    s = _run(tmp_path_factory.mktemp("clean") / "ckpt").check().summary
    assert s["restart_count"] == 0 and s["resumed_from"] is None
    assert s["losses"] == pytest.approx(reference_lm(STEPS, 2)[0], rel=1e-5, abs=1e-5)
    return s


@pytest.mark.parametrize("fail_in,fail_at,removed", [
    ("step", 4, []),                        # dies between checkpoints
    ("save", 5, ["step_000006.tmp"]),       # dies after writing shards, before the commit
])
def test_killed_rank_resumes_exactly(tmp_path, uninterrupted, fail_in, fail_at, removed):
    ckpt = tmp_path / "ckpt"
    res = _run(ckpt, "--fail-at-step", str(fail_at), "--fail-in", fail_in, restarts=1).check()
    assert f"injected failure at step {fail_at} ({fail_in})" in res.stdout
    s = res.summary
    assert s["restart_count"] == 1
    assert os.path.basename(s["resumed_from"]) == "step_000003"
    assert s["start_step"] == 3
    assert s["removed_partial"] == removed
    # Every step exactly once: same loss history and bit-identical final state.
    assert len(s["losses"]) == STEPS
    assert s["losses"] == uninterrupted["losses"]
    assert s["final_digest"] == uninterrupted["final_digest"]
    # Only committed checkpoints remain (--keep 2), none half-written.
    assert sorted(os.listdir(ckpt)) == ["step_000006", "step_000008"]
    assert all((ckpt / n / ".metadata").is_file() for n in os.listdir(ckpt))

