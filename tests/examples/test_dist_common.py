"""The shared plumbing of the examples, in process: CPU backend for offload, a launch
number all nodes agree on, the exit policy, TF32 off, buffers under offload, and the
checkpoint helpers with numpy hidden."""

import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from example_helpers import (
    ROOT,
    SCRIPTS,
    assert_one_line_error,
    example_env,
    hidden_numpy_env,
    load_script,
    run_python,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

common = load_script("_dist_common")


@pytest.mark.parametrize(
    "spec,want",
    [
        ("nccl", "cuda:nccl,cpu:gloo"),  # torchtitan's choice for CPU offload
        ("cuda:gloo", "cuda:gloo,cpu:gloo"),  # the CPU emulation of "nccl"
        ("xccl", "xpu:xccl,cpu:gloo"),
        ("gloo", "gloo"),  # already serves CPU
        ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"),
    ],
)
def test_with_cpu_backend(spec, want):
    assert common.with_cpu_backend(spec) == want


def test_launch_number_agrees_when_restart_counts_do_not():
    """Node A's worker fails (its agent counts a restart); node B's agent restarts its
    healthy worker for the membership change and counts nothing. The restart counts then
    differ (1 vs 0); the launch numbers, taken from the shared store, do not."""
    store = dist.HashStore()
    first = [common.launch_number(store, rank, 2) for rank in (0, 1)]
    second = [common.launch_number(store, rank, 2) for rank in (1, 0)]  # any order
    assert first == [1, 1] and second == [2, 2]
    # A resize to 3 ranks starts its own count, so a new rank 2 agrees with the others.
    assert [common.launch_number(store, rank, 3) for rank in (0, 1, 2)] == [1, 1, 1]


class _Exited(Exception):
    pass


@pytest.mark.parametrize(
    "gloo,clean_env,hard_exit",
    [
        (True, None, True),  # gloo's teardown can abort a finished rank: skip it
        (False, None, False),  # NCCL-only: a normal exit, atexit handlers run
        (True, "1", False),  # asked for a normal exit
    ],
)
def test_hard_exit_only_after_gloo(monkeypatch, gloo, clean_env, hard_exit):
    calls = []

    def fake_exit(code):
        calls.append(code)
        raise _Exited

    monkeypatch.setattr(common.os, "_exit", fake_exit)
    monkeypatch.setattr(common, "_GLOO_USED", gloo)
    if clean_env:
        monkeypatch.setenv("DIST_EXAMPLES_CLEAN_EXIT", clean_env)
    else:
        monkeypatch.delenv("DIST_EXAMPLES_CLEAN_EXIT", raising=False)
    try:
        common.run(lambda argv: None)
    except _Exited:
        pass
    assert calls == ([0] if hard_exit else [])
    calls.clear()
    common.run(lambda argv: None, [])  # in-process callers keep their interpreter
    assert calls == []


TF32_CHECK = """
import sys; sys.path.insert(0, {scripts!r})
import torch, _dist_common as common
{enable}
assert common.fp32_precision()["cuda_matmul"] == "tf32", common.fp32_precision()
common.exact_fp32()
assert common.fp32_precision() == {{"cuda_matmul": "ieee", "cudnn": "ieee"}}, common.fp32_precision()
torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32  # still readable
"""


@pytest.mark.parametrize(
    "enable",
    [
        'torch.set_float32_matmul_precision("high")',  # the legacy API
        'torch.backends.cuda.matmul.fp32_precision = "tf32"',  # the new one
    ],
)
def test_exact_fp32_overrides_an_environment_with_tf32(enable):
    # A fresh process each: these switches are global and stick to the interpreter.
    code = TF32_CHECK.format(scripts=str(SCRIPTS), enable=enable)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.parametrize("offload", [False, True])
def test_materialize_puts_buffers_on_the_device_under_offload(offload):
    """Parameters go to the host under offload, buffers to the compute device ("meta"
    stands in for the GPU here, since this machine has none)."""
    fsdp2 = load_script("fsdp2_train")
    with torch.device("meta"):
        model = common.ToyTransformer()
    fsdp2.materialize(model, torch.device("meta"), cpu_offload=offload)
    assert {p.device.type for p in model.parameters()} == {"cpu" if offload else "meta"}
    assert model.positions.device.type == "meta"
    assert "positions" not in model.state_dict()  # non-persistent: checkpoints do not carry it


def test_tensor_bytes_of_a_view_is_the_view():
    base = torch.arange(10, dtype=torch.float32)
    view = base[3:7]
    assert len(common.tensor_bytes(view)) == 16
    assert torch.frombuffer(bytearray(common.tensor_bytes(view)), dtype=torch.float32).tolist() == [
        3,
        4,
        5,
        6,
    ]
    assert common.tensor_bytes(torch.empty(0)) == b""


CHECKPOINT_HELPERS = f"""
import sys
sys.path.insert(0, {str(SCRIPTS)!r})
import torch, torch.distributed as dist
import _dist_common as common, dcp_checkpoint
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
try:
    torch.zeros(1).numpy()
    raise SystemExit("numpy is not hidden")
except RuntimeError:
    pass
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
model = common.ToyTransformer(); model.init_weights(0)
for block in model.layers.values():
    fully_shard(block, mesh=init_device_mesh("cpu", (1,)))
fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
opt = torch.optim.AdamW(model.parameters())
x, y = common.token_batch(0, 0, 0)
common.lm_loss(model(x), y).backward()
opt.step()
print("DIGEST", common.state_digest(model, opt))
dcp_checkpoint.export_full(model, sys.argv[1])
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_checkpoint_helpers_without_numpy(tmp_path):
    """state_digest and the safetensors export need torch only (they used .numpy())."""
    out = tmp_path / "model.safetensors"
    env = example_env(hidden_numpy_env(tmp_path / "hide"))
    res = subprocess.run(
        [sys.executable, "-c", CHECKPOINT_HELPERS, str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    digest = next(ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("DIGEST"))
    assert len(digest) == 64
    from example_helpers import read_safetensors

    exported = read_safetensors(out)
    ref = common.ToyTransformer()
    ref.init_weights(0)
    assert sorted(exported) == sorted(ref.state_dict())


@pytest.mark.slow
def test_dcp_without_numpy_is_one_line(tmp_path):
    """dcp.save itself needs numpy in torch 2.13 (its plans travel through gather_object,
    which unpickles via Tensor.numpy()): say so in one line, before any work."""
    res = run_python(
        "dcp_checkpoint.py", ["--save", str(tmp_path / "ckpt")], env=hidden_numpy_env(tmp_path)
    )
    assert_one_line_error(res, "numpy is needed for dcp.save and dcp.load")
    assert res.returncode == 2
