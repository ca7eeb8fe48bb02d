"""Cluster launch templates: they parse, and name scripts and flags that exist."""

import re
import shlex
import subprocess

import pytest
import yaml
from example_helpers import ROOT, SCRIPTS, load_script
from torch.distributed.run import get_args_parser

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

    def stop(parsed, **_):
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
    body = text[text.index("exec torchrun") :]
    body = body[: body.index("\n'")]
    # Replace shell expansions with plausible values, then split like the shell would.
    values = {"GPUS_PER_NODE": "8", "head_node": "node-001", "RDZV_PORT": "29400"}
    body = re.sub(
        r'"\'"(.*?)"\'"',
        lambda m: re.sub(r"\$(\w+)", lambda v: values[v.group(1)], m.group(1)),
        body,
    )
    body = re.sub(r'"\$[A-Za-z_]+"', "1", body.replace("\\\n", " "))
    tokens = shlex.split(body)[2:]  # drop "exec torchrun"
    check_torchrun_args(tokens)
    assert tokens[tokens.index("--nproc-per-node") + 1] == "8"
    assert tokens[tokens.index("--rdzv-endpoint") + 1] == "node-001:29400"
    i = next(i for i, t in enumerate(tokens) if t.endswith(".py"))
    check_script_args(tokens[i], tokens[i + 1 :], monkeypatch)


def test_slurm_template_follows_the_launch_guide():
    """The points launching.md makes about launching under SLURM."""
    text = SLURM.read_text()
    code = "\n".join(
        ln
        for ln in text.splitlines()
        if not ln.lstrip().startswith("#") or ln.startswith("#SBATCH")
    )
    body = code[code.index("exec torchrun") :]
    # c10d assigns the ranks; torchrun warns about and ignores --node-rank.
    assert "--node-rank" not in body and "--rdzv-backend c10d" in body
    # The endpoint is the first node's hostname from scontrol, not an address lookup.
    assert 'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)' in code
    assert "--ip-address" not in code and "$head_node:$RDZV_PORT" in body
    # srun gets --cpus-per-task itself (Slurm >= 22.05 no longer passes sbatch's on).
    (srun,) = [ln for ln in code.splitlines() if ln.startswith("srun ")]
    assert '--cpus-per-task="$SLURM_CPUS_PER_TASK"' in srun
    # The guide's port and CPU count.
    guide = (ROOT / "references" / "guides" / "launching.md").read_text()
    assert "RDZV_PORT=${RDZV_PORT:-29400}" in code and ":29400" in guide
    assert "#SBATCH --cpus-per-task=64" in code and "#SBATCH --cpus-per-task=64" in guide
    # 1 is what torchrun would set anyway, and it keeps the flight recorder from dumping.
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" not in code
    # fsdp2_train.py does not resume: a restart would start over.
    assert "--max-restarts" not in body


def test_k8s_pytorchjob_parses(monkeypatch):
    job = yaml.safe_load(K8S.read_text())
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"}
    nodes = sum(s["replicas"] for s in specs.values())
    for spec in specs.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["command"] == ["torchrun"]
        args = [
            re.sub(
                r"\$\((\w+)\)", lambda m: {"MASTER_ADDR": "10.0.0.1"}.get(m.group(1), "23456"), a
            )
            for a in container["args"]
        ]
        check_torchrun_args(args)
        assert f"--nnodes={nodes}" in args
        i = next(i for i, t in enumerate(args) if t.endswith(".py"))
        check_script_args(args[i], args[i + 1 :], monkeypatch)


def test_templates_reject_a_misspelt_flag(monkeypatch):
    """The check above would notice a flag the script does not have."""
    with pytest.raises(SystemExit):
        check_script_args("scripts/fsdp2_train.py", ["--mixed-precison", "bf16"], monkeypatch)
