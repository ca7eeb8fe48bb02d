"""Every example: --help works, and a bad launch is one line on stderr with exit code 2."""

import pytest
import torch
from example_helpers import SCRIPTS, assert_one_line_error, load_script, run_python

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

EXAMPLES = [
    "ddp_train",
    "join_uneven",
    "fsdp2_train",
    "fsdp1_train",
    "dcp_checkpoint",
    "hsdp_train",
    "tp_fsdp_train",
    "elastic_resume",
]


def _call(name, argv, monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    mod = load_script(name)
    with pytest.raises(SystemExit) as exc:
        mod.common.run(mod.main, argv)
        raise SystemExit(0)
    return exc.value.code


def test_all_examples_exist():
    for name in EXAMPLES:
        assert (SCRIPTS / f"{name}.py").is_file(), name


@pytest.mark.parametrize("name", EXAMPLES)
def test_help(name, monkeypatch, capsys):
    assert _call(name, ["--help"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "--backend" in out and "--device" in out and "torchrun" not in out.split("\n")[0]


@pytest.mark.parametrize("name", ["ddp_train", "fsdp2_train", "hsdp_train"])
@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--backend", "carrier-pigeon"], "unknown backend 'carrier-pigeon'"),
        (["--backend", "mpi"], "backend 'mpi' is not available"),
        (["--device", "cuda"], "device 'cuda' is not available"),
    ],
)
def test_bad_backend_or_device_is_one_line(name, flags, needle, monkeypatch, capsys):
    if "cuda" in flags and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert _call(name, flags, monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err


def test_world_size_without_torchrun_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    mod = load_script("fsdp2_train")
    with pytest.raises(SystemExit) as exc:
        mod.common.run(mod.main, [])
    assert exc.value.code == 2
    assert "launch with torchrun" in capsys.readouterr().err


@pytest.mark.slow
def test_bad_launch_in_a_real_process():
    res = run_python("join_uneven.py", ["--backend", "nccl"])
    assert_one_line_error(res, "nccl")
    assert res.stderr.strip().count("\n") == 0
