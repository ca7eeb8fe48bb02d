"""Elastic example: a rank is killed mid-run, torchrun restarts the job, and the final
weights and optimizer state equal an uninterrupted run's bit for bit; on one node, and
on two nodes (two torchrun agents), where the agents disagree on the restart count."""

import os

import pytest
from example_helpers import (
    finish,
    free_port,
    kill,
    reference_lm,
    run_skill_launch,
    run_torchrun,
    script_args,
    start,
    torchrun_cmd,
)

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

STEPS, EVERY = 8, 3  # checkpoints after steps 2, 5 and 7 (next_step 3, 6, 8)
# Below every gradient norm here, so clipping acts (and must resume exactly too).
MAX_NORM = 0.1


def _args(ckpt, *extra):
    return [
        "--ckpt-dir",
        str(ckpt),
        "--steps",
        str(STEPS),
        "--ckpt-every",
        str(EVERY),
        "--max-norm",
        str(MAX_NORM),
        *extra,
    ]


def _run(ckpt, *extra, restarts=0):
    rdzv = ["--standalone", f"--max-restarts={restarts}"]
    return run_torchrun("elastic_resume.py", 2, _args(ckpt, *extra), torchrun_args=rdzv)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    s = _run(tmp_path_factory.mktemp("clean") / "ckpt").check().summary
    assert s["restart_count"] == 0 and s["resumed_from"] is None and s["launch"] == 1
    assert s["losses"] == pytest.approx(
        reference_lm(STEPS, 2, max_norm=MAX_NORM)[0], rel=1e-5, abs=1e-5
    )
    return s


def _check_resumed(s, uninterrupted, ckpt):
    assert os.path.basename(s["resumed_from"]) == "step_000003"
    assert s["start_step"] == 3
    # Every step exactly once: same loss history and bit-identical final state.
    assert len(s["losses"]) == STEPS
    assert s["losses"] == uninterrupted["losses"]
    assert s["final_digest"] == uninterrupted["final_digest"]
    # Only committed checkpoints remain (--keep 2), none half-written.
    assert sorted(os.listdir(ckpt)) == ["step_000006", "step_000008"]
    assert all((ckpt / n / ".metadata").is_file() for n in os.listdir(ckpt))


def test_killed_rank_resumes_exactly_mid_save(tmp_path, uninterrupted):
    """One node: dies after writing its shards, before the commit."""
    ckpt = tmp_path / "ckpt"
    res = _run(ckpt, "--fail-at-step", "5", "--fail-in", "save", restarts=1).check()
    assert "injected failure at step 5 (save)" in res.stdout
    s = res.summary
    assert s["restart_count"] == 1 and s["launch"] == 2
    assert s["removed_partial"] == ["step_000006.tmp"]
    _check_resumed(s, uninterrupted, ckpt)


def test_skill_command_resumes_after_a_killed_rank(tmp_path):
    """SKILL.md's command as written, with its defaults (8 steps, a checkpoint every 3, the
    last 2 kept, clipping at 1.0): rank 1 dies in step 5, before that step's checkpoint;
    torchrun restarts both ranks, which resume after step 2 and train as one process would."""
    res = run_skill_launch("elastic_resume.py", tmp_path)
    assert "injected failure at step 5 (step)" in res.stdout
    s = res.summary
    assert s["restart_count"] == 1 and s["launch"] == 2 and s["removed_partial"] == []
    assert os.path.basename(s["resumed_from"]) == "step_000003" and s["start_step"] == 3
    assert s["losses"] == pytest.approx(reference_lm(8, 2)[0], rel=1e-5, abs=1e-5)
    ckpt = tmp_path / "elastic_ckpt"
    assert sorted(os.listdir(ckpt)) == ["step_000006", "step_000008"]


def test_two_nodes_restart_together(tmp_path, uninterrupted):
    """Two agents (nodes), one worker each; node B's worker dies between checkpoints.

    Node A's worker hangs at that point, as NCCL ranks do when a peer dies, so agent A
    restarts it for the membership change and, by torchrun's rules, counts no restart:
    the restart counts of the second start are 0 and 1. With the process group's store
    prefix taken from that count, the two ranks waited in different namespaces until
    the timeout; the launch number is the same on both."""
    ckpt = tmp_path / "ckpt"
    port = free_port()
    args = script_args(_args(ckpt, "--fail-at-step", "4", "--fail-hang-s", "60"), "cpu")
    procs = []
    for _ in range(2):
        rdzv = [
            "--nnodes=2",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=elastic-two-nodes",
            "--max-restarts=1",
        ]
        procs.append(start(torchrun_cmd("elastic_resume.py", 1, args, rdzv)))
    try:
        results = [finish(p) for p in procs]
    finally:
        for p in procs:
            kill(p)
    for r in results:
        r.check()
    assert sum("injected failure at step 4 (step)" in r.stdout for r in results) == 1
    (s,) = [r.summary for r in results if '"script"' in r.stdout]
    assert s["world_size"] == 2 and s["launch"] == 2
    assert sorted(s["restart_counts"]) == [0, 1]
    assert s["removed_partial"] == []
    _check_resumed(s, uninterrupted, ckpt)
