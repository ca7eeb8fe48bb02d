"""Cluster launch templates: they parse, and name scripts and flags that exist."""

import re
import shlex
import subprocess

import pytest
import yaml
from torch.distributed.run import get_args_parser

from example_helpers import ROOT, SCRIPTS, load_script

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SLURM = ROOT / "assets" / "slurm" / "fsdp2_train.sbatch"
K8S = ROOT / "assets" / "k8s" / "fsdp2_pytorchjob.yaml"


class _Parsed(Exception):
    pass


def check_script_args(script: str, args: list[str], monkeypatch) -> None:
    """Run the example's own argument parsing, stopping before any process group."""
    path = ROOT / script
    assert path.parent == SCRIPTS and path.is_file(), script
    mod = load_script(path.stem)

    def stop(parsed):
        raise _Parsed(parsed)

    monkeypatch.setattr(mod.common, "distributed", stop)
    for k in ("WORLD_SIZE", "RANK", "MASTER_ADDR"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(_Parsed):
        mod.main(args)  # argparse exits (SystemExit 2) on an unknown flag or bad choice


def check_torchrun_args(args: list[str]) -> None:
    parsed = get_args_parser().parse_args(args)  # exits on an unknown torchrun flag
    assert parsed.rdzv_backend == "c10d"
    assert parsed.training_script.startswith("scripts/")


def test_slurm_template_parses(monkeypatch):
    subprocess.run(["bash", "-n", str(SLURM)], check=True)
    text = SLURM.read_text()
    assert "#SBATCH --nodes=" in text and "srun" in text
    body = text[text.index("exec torchrun"):]
    body = body[:body.index("\n'")]
    # Replace shell expansions with plausible values, then split like the shell would.
    values = {"GPUS_PER_NODE": "8", "head_addr": "10.0.0.1", "RDZV_PORT": "29500"}
    body = re.sub(r'"\'"(.*?)"\'"', lambda m: re.sub(r"\$(\w+)", lambda v: values[v.group(1)], m.group(1)), body)
    body = re.sub(r'"\$[A-Za-z_]+"', "1", body.replace("\\\n", " "))
    tokens = shlex.split(body)[2:]  # drop "exec torchrun"
    check_torchrun_args(tokens)
    assert tokens[tokens.index("--nproc-per-node") + 1] == "8"
    assert tokens[tokens.index("--rdzv-endpoint") + 1] == "10.0.0.1:29500"
    i = next(i for i, t in enumerate(tokens) if t.endswith(".py"))
    check_script_args(tokens[i], tokens[i + 1:], monkeypatch)


def test_k8s_pytorchjob_parses(monkeypatch):
    job = yaml.safe_load(K8S.read_text())
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"}
    nodes = sum(s["replicas"] for s in specs.values())
    for spec in specs.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["command"] == ["torchrun"]
        args = [re.sub(r"\$\((\w+)\)", lambda m: {"MASTER_ADDR": "10.0.0.1"}.get(m.group(1), "23456"), a)
                for a in container["args"]]
        check_torchrun_args(args)
        assert f"--nnodes={nodes}" in args
        i = next(i for i, t in enumerate(args) if t.endswith(".py"))
        check_script_args(args[i], args[i + 1:], monkeypatch)


def test_templates_reject_a_misspelt_flag(monkeypatch):
    """The check above would notice a flag the script does not have."""
    with pytest.raises(SystemExit):
        check_script_args("scripts/fsdp2_train.py", ["--mixed-precison", "bf16"], monkeypatch)
