"""The standalone examples (pretrained load, compile, data pipeline, eval + export) and diagnose.py.

Every run uses a copy of the script alone in a temporary folder, so a pass
also shows the file needs nothing else from the repo (the diagnosis SKILL.md
tells an agent to run is run as written, from the repo).  Runs share torchrun
launches where they can (run_many: a launch costs a torch import per process).
Each example is compared with a single-process reference computed here, and
each feature has a negative check: a patched copy (or an in-process call of
the patched code) with the feature broken on purpose, which the same
assertions must reject.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import re
import socket
import sys
import time
import types
from pathlib import Path

import pytest
import torch
from example_helpers import (
    SCRIPTS,
    Result,
    Run,
    compiled,
    finish,
    load_script,
    run_many,
    run_skill_launch,
    selected_tests,
    start,
    torchrun_cmd,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

TOL = dict(rel=1e-5, abs=1e-6)


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def copy_script(name: str, folder: Path, patch: list[tuple[str, str]] = ()) -> Path:
    """The script alone in `folder`, optionally with (old, new) replacements that break it."""
    src = (SCRIPTS / f"{name}.py").read_text()
    for old, new in patch:
        assert old in src, f"patch target not found in {name}.py: {old!r}"
        src = src.replace(old, new)
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / f"{name}.py"
    dst.write_text(src)
    return dst


def launch(
    path: Path, args: list[str], nproc: int = 2, env: dict | None = None, timeout: float = 240
) -> Result:
    cmd = torchrun_cmd(str(path), nproc, ["--device", "cpu", *args])
    return finish(start(cmd, env, cwd=path.parent), timeout)


def patched_module(name: str, patch: list[tuple[str, str]]) -> types.ModuleType:
    """Import a patched copy of a script in-process (the scripts have no import-time side effects)."""
    src = (SCRIPTS / f"{name}.py").read_text()
    for old, new in patch:
        assert old in src, old
        src = src.replace(old, new)
    mod = types.ModuleType(f"{name}_patched")
    mod.__file__ = str(SCRIPTS / f"{name}.py")
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def sha256(sd: dict) -> str:
    """The scripts' digest, written out again: sorted keys, fp32 bytes."""
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(sd[k].detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def train_reference(
    mod,
    model,
    steps: int,
    world: int,
    *,
    lr: float = 1e-2,
    batch: int = 4,
    seed: int = 0,
    start: int = 0,
    opt=None,
) -> list[float]:
    """One process, every rank's batch: loss/world per rank before backward, as FSDP averages gradients."""
    opt = opt or torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for step in range(start, start + steps):
        total = 0.0
        for r in range(world):
            x, y = mod.token_batch(seed, r, step, batch)
            part = mod.lm_loss(model(x), y) / world
            part.backward()
            total += part.item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total)
    return losses


# --------------------------------------------------------------------------
# fsdp2_load_pretrained.py
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A 'pretrained' tied-embedding checkpoint, made here and not by the script."""
    mod = load_script("fsdp2_load_pretrained")
    torch.manual_seed(1234)
    model = mod.Transformer(tie_embeddings=True)
    with torch.no_grad():
        for p in model.parameters():  # no tensor keeps a default-init value
            p.add_(torch.randn_like(p) * 0.05)
    path = tmp_path_factory.mktemp("pretrained") / "pretrained.pt"
    torch.save(model.state_dict(), path)
    return mod, path, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def shared_launch(request, pretrained, tmp_path_factory):
    """{test name: Result} of the selected tests' first launches, which share one torchrun
    launch (run_many; each run still uses a copy alone in a folder), and "folders": {test
    name: the folder of its copy}."""
    _, checkpoint, _ = pretrained
    folders = {}

    def copy(test: str, name: str) -> Path:
        folders[test] = tmp_path_factory.mktemp(name)
        return copy_script(name, folders[test])

    wanted = selected_tests(request)
    runs = {}
    if "test_load_pretrained_torch_file" in wanted:
        script = copy("test_load_pretrained_torch_file", "fsdp2_load_pretrained")
        runs["test_load_pretrained_torch_file"] = Run(script, ["--checkpoint", str(checkpoint)])
    if "test_eval_and_export" in wanted:
        script = copy("test_eval_and_export", "fsdp2_eval_export")
        export = folders["test_eval_and_export"] / "out"
        runs["test_eval_and_export"] = Run(script, ["--export", str(export)])
    if "test_data_pipeline_resume_is_exact" in wanted:
        script = copy("test_data_pipeline_resume_is_exact", "data_pipeline")
        ckpt = folders["test_data_pipeline_resume_is_exact"] / "ckpt"
        runs["data full"] = Run(script, ["--epochs", "2"])
        # Stopped after 7 steps: epoch 1, two batches in; the test runs the same command again.
        stop = ["--epochs", "2", "--checkpoint-dir", str(ckpt), "--stop-after", "7"]
        runs["test_data_pipeline_resume_is_exact"] = Run(script, stop)
    if "test_compile_matches_eager" in wanted and compile_unavailable() is None:
        script = copy("test_compile_matches_eager", "fsdp2_compile")
        # aot_eager: dynamo, AOT autograd and FSDP2's hooks as with inductor, without the C++
        # code generation that costs about 45 s of the suite's 2 CPU cores; the GPU check
        # (tests/gpu/run_gpu.py) runs inductor.
        runs["test_compile_matches_eager"] = Run(
            script, ["--steps", "3", "--compile-backend", "aot_eager"]
        )
    if "test_load_pretrained_without_broadcast_fails" in wanted:
        # Last: it is meant to fail, which ends the launch.
        broken = copy_script(
            "fsdp2_load_pretrained",
            tmp_path_factory.mktemp("no_broadcast"),
            [("broadcast_from_rank0=True", "broadcast_from_rank0=False")],
        )
        runs["test_load_pretrained_without_broadcast_fails"] = Run(
            broken, ["--checkpoint", str(checkpoint), "--steps", "0"]
        )
    results = dict(zip(runs, run_many(list(runs.values()), flags=["--device", "cpu"])))
    return {**results, "folders": folders}


@pytest.fixture(scope="module")
def second_launch(request, shared_launch, tmp_path_factory):
    """{test name: Result} of the runs that need a launch after shared_launch's (the resumed
    data pipeline) or end the launch (the diagnosis that finds problems), sharing one."""
    wanted = selected_tests(request)
    runs = {}
    if "test_data_pipeline_resume_is_exact" in wanted:
        # The same command again, in a new launch, as a resume after a crash would be.
        folder = shared_launch["folders"]["test_data_pipeline_resume_is_exact"]
        resume = ["--epochs", "2", "--checkpoint-dir", str(folder / "ckpt")]
        runs["test_data_pipeline_resume_is_exact"] = Run(folder / "data_pipeline.py", resume)
    if "test_diagnose_json_names_wrong_and_slow_rank" in wanted:
        # Last: problems found mean a non-zero exit, which ends the launch.
        script = copy_script("diagnose", tmp_path_factory.mktemp("diagnose_json"))
        runs["test_diagnose_json_names_wrong_and_slow_rank"] = Run(
            script, DIAG_JSON_ARGS, {"DIAGNOSE_TEST_FAULT": "corrupt:all_gather:1,slow:bandwidth:1"}
        )
    return dict(zip(runs, run_many(list(runs.values()), flags=["--device", "cpu"])))


def check_loaded(mod, s: dict, sd: dict) -> None:
    assert s["weights_sha256"] == sha256(sd), "the gathered shards differ from the file's weights"
    assert s["tied"] and s["sharded"]
    total = sum(p.numel() for p in mod.Transformer(tie_embeddings=True).parameters())
    assert sum(s["params_per_rank"]) == total and max(s["params_per_rank"]) < total
    ref = mod.Transformer(tie_embeddings=True)
    ref.load_state_dict(sd)
    # The steps also need the RoPE buffer recomputed and the tie in place.
    assert s["losses"] == pytest.approx(train_reference(mod, ref, s["steps"], 2, lr=1e-3), **TOL)


def test_load_pretrained_torch_file(pretrained, shared_launch):
    mod, _, sd = pretrained
    s = shared_launch["test_load_pretrained_torch_file"].check().summary
    assert s["world_size"] == 2 and s["format"] == "torch" and s["steps"] == 2
    check_loaded(mod, s, sd)


def test_load_pretrained_safetensors(pretrained, tmp_path):
    st = pytest.importorskip("safetensors.torch", reason="the safetensors package is not installed")
    mod, _, sd = pretrained
    path = tmp_path / "model.safetensors"
    # Hugging Face's layout: the tied output weight is not stored.
    st.save_file({k: v.contiguous() for k, v in sd.items() if k != "output.weight"}, str(path))
    s = (
        launch(copy_script("fsdp2_load_pretrained", tmp_path), ["--checkpoint", str(path)])
        .check()
        .summary
    )
    assert s["format"] == "safetensors"
    check_loaded(mod, s, sd)


def test_load_pretrained_without_broadcast_fails(shared_launch):
    """Negative: without broadcast_from_rank0, ranks 1.. (which read nothing) get no weights."""
    res = shared_launch["test_load_pretrained_without_broadcast_fails"]
    assert res.returncode != 0 and "weights_sha256" not in res.stdout
    assert "state_dict" in res.stderr  # torch: "... but model state_dict is empty"


# --------------------------------------------------------------------------
# fsdp2_compile.py
# --------------------------------------------------------------------------


def compile_unavailable() -> str | None:
    try:
        import torch._dynamo

        if not torch._dynamo.is_dynamo_supported():
            return f"torch.compile does not support Python {sys.version.split()[0]}"
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()  # inductor's CPU code needs a C++ compiler
    except Exception as e:
        return f"torch.compile cannot run on this CPU build: {type(e).__name__}: {e}"
    return None


def test_compile_matches_eager(request):
    reason = compile_unavailable()
    if reason:
        pytest.skip(reason)
    s = request.getfixturevalue("shared_launch")["test_compile_matches_eager"].check().summary
    assert s["compile"] and s["ac"] and s["compile_backend"] == "aot_eager"
    assert compiled(s), s["compiled_graphs"]
    mod = load_script("fsdp2_compile")
    torch.manual_seed(0)
    assert s["losses"] == pytest.approx(
        train_reference(mod, mod.Transformer(), 3, 2, lr=1e-2), **TOL
    )


def test_compile_result_dropped_is_detected():
    """Negative: torch.compile(block) returns a new module; dropping it compiles nothing.

    The patched copy runs in this process, on one rank: with nothing compiled, the check
    has nothing that needs processes of its own, and a torchrun launch costs three."""
    from torch._dynamo.utils import counters

    broken = patched_module(
        "fsdp2_compile",
        [
            (
                "block.compile(backend=backend, fullgraph=True)",
                "torch.compile(block, backend=backend, fullgraph=True)",
            )
        ],
    )
    counters.clear()  # the script counts this process's graphs: none from earlier tests
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        broken.main(["--device", "cpu", "--steps", "2"])
    s = json.loads(out.getvalue().strip().splitlines()[-1])
    assert s["compile"] and s["compile_backend"] == "inductor"
    assert not compiled(s) and s["compiled_graphs"] == [0, 0]


# --------------------------------------------------------------------------
# data_pipeline.py
# --------------------------------------------------------------------------


def data_args(**kw) -> argparse.Namespace:
    base = dict(seed=0, batch_size=4, drop_last=False, num_workers=0)
    return argparse.Namespace(**{**base, **kw})


def epoch_orders(mod, n_samples: int, world: int, epochs: int = 2, **kw) -> list[list[list[int]]]:
    """[epoch][rank] -> sample ids in the order the script's loader yields them."""
    args = data_args(**kw)
    ds = mod.TokenWindows(mod.synthetic_corpus(n_samples, 4, 16, 0), 4)
    out = []
    for epoch in range(epochs):
        per_rank = []
        for r in range(world):
            loader, sampler = mod.make_loader(ds, r, world, args)
            progress = mod.Progress()
            progress.epoch = epoch
            mod.start_epoch(sampler, progress, args.batch_size)
            per_rank.append([i for idx, _, _ in loader for i in idx.tolist()])
        out.append(per_rank)
    return out


def exactly_once(per_rank: list[list[int]], n: int) -> bool:
    flat = [i for ids in per_rank for i in ids]
    return sorted(flat) == list(range(n))


def test_sampler_covers_each_sample_once_per_epoch():
    mod = load_script("data_pipeline")
    orders = epoch_orders(mod, 40, 2)
    assert all(exactly_once(e, 40) for e in orders)
    assert orders[0] != orders[1]  # set_epoch: a new shuffle every epoch
    # 41 samples on 2 ranks: padding repeats one sample, drop_last leaves one out; never a duplicate otherwise.
    padded = [i for ids in epoch_orders(mod, 41, 2, epochs=1)[0] for i in ids]
    assert len(padded) == 42 and set(padded) == set(range(41))
    dropped = [i for ids in epoch_orders(mod, 41, 2, epochs=1, drop_last=True)[0] for i in ids]
    assert len(dropped) == len(set(dropped)) == 40


def test_sampler_without_set_epoch_repeats_the_order():
    """Negative: with set_epoch removed, the check above fails: both epochs have one order."""
    mod = patched_module("data_pipeline", [("    sampler.set_epoch(progress.epoch)\n", "")])
    orders = epoch_orders(mod, 40, 2)
    assert orders[0] == orders[1]


@pytest.mark.parametrize("broken", [False, True], ids=["skip", "negative-without-skip"])
def test_sampler_skip_resumes_mid_epoch(broken):
    """The resume point skips exactly the trained batches; with the skip removed the epoch restarts."""
    no_skip = [
        ("    sampler.skip = progress.batch_in_epoch * batch_size\n", "    sampler.skip = 0\n")
    ]
    mod = patched_module("data_pipeline", no_skip) if broken else load_script("data_pipeline")
    ds = mod.TokenWindows(mod.synthetic_corpus(40, 4, 16, 0), 4)
    loader, sampler = mod.make_loader(ds, 1, 2, data_args())
    progress = mod.Progress()
    progress.epoch = 1
    mod.start_epoch(sampler, progress, 4)
    whole_epoch = [i for idx, _, _ in loader for i in idx.tolist()]
    progress.batch_in_epoch = 2
    mod.start_epoch(sampler, progress, 4)
    rest = [i for idx, _, _ in loader for i in idx.tolist()]
    assert (rest == whole_epoch[8:]) is not broken


def data_reference(
    mod, epochs: int, world: int, steps_per_epoch: int, lr: float = 1e-2, warmup: int = 2
):
    args = data_args(num_workers=0)
    ds = mod.TokenWindows(mod.synthetic_corpus(40, 16, 64, 0), 16)
    loaders = [mod.make_loader(ds, r, world, args) for r in range(world)]
    torch.manual_seed(0)
    model = mod.Transformer(vocab=64, max_seq=16)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, mod.lr_lambda(epochs * steps_per_epoch, warmup))
    losses = []
    for epoch in range(epochs):
        for _, sampler in loaders:
            sampler.set_epoch(epoch)
        for batches in zip(*(loader for loader, _ in loaders)):
            total = 0.0
            for _, x, y in batches:
                part = mod.lm_loss(model(x), y) / world
                part.backward()
                total += part.item()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            losses.append(total)
    return losses


def test_data_pipeline_resume_is_exact(shared_launch, second_launch):
    full = shared_launch["data full"].check().summary
    assert full["steps_per_epoch"] == 5 and full["next_step"] == 10 and full["resumed_from"] is None
    for epoch in ("0", "1"):
        assert exactly_once(full["seen"][epoch], 40)
    assert full["seen"]["0"] != full["seen"]["1"]
    mod = load_script("data_pipeline")
    assert full["losses"] == pytest.approx(data_reference(mod, 2, 2, 5), **TOL)

    # Stopped after 7 steps: epoch 1, two batches in; then the same command again, a launch
    # of its own, as a resume after a crash would be.
    first = shared_launch["test_data_pipeline_resume_is_exact"].check().summary
    assert first["stopped"] and first["next_step"] == 7
    second = second_launch["test_data_pipeline_resume_is_exact"].check().summary
    assert second["resumed_from"].endswith("step_000007") and second["next_step"] == 10
    # Bit for bit: the same losses, learning rates, data order and final weights.
    assert first["losses"] + second["losses"] == full["losses"]
    assert first["lrs"] + second["lrs"] == full["lrs"]
    assert second["weights_sha256"] == full["weights_sha256"]
    for r in range(2):
        assert first["seen"]["1"][r] + second["seen"]["1"][r] == full["seen"]["1"][r]


# --------------------------------------------------------------------------
# fsdp2_eval_export.py
# --------------------------------------------------------------------------


def evaluate_reference(model, val_x, val_y) -> float:
    with torch.no_grad():
        logits = model(val_x)
        return torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).double(), val_y.flatten()
        ).item()


def test_eval_and_export(shared_launch):
    out = shared_launch["folders"]["test_eval_and_export"] / "out"
    s = shared_launch["test_eval_and_export"].check().summary
    assert s["steps"] == 4 and [e["after_step"] for e in s["evals"]] == [1, 3]

    # A user without torch.distributed: plain torch.load + load_state_dict.
    mod = load_script("fsdp2_eval_export")
    config = json.loads((out / "config.json").read_text())
    exported = torch.load(out / "model.pt", weights_only=True)
    plain = mod.Transformer(**config)
    plain.load_state_dict(exported)
    assert sha256(exported) == s["export_sha256"], (
        "the file differs from the gathered trained weights"
    )

    # Single-process training, evaluated after the same steps (1 and 3).
    torch.manual_seed(0)
    ref = mod.Transformer(**config)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    val_x, val_y = mod.validation_set(9, 0)
    ref_losses = train_reference(mod, ref, 2, 2, opt=opt)
    ref_evals = [evaluate_reference(ref, val_x, val_y)]
    ref_losses += train_reference(mod, ref, 2, 2, opt=opt, start=2)
    ref_evals.append(evaluate_reference(ref, val_x, val_y))
    assert s["losses"] == pytest.approx(ref_losses, **TOL)
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(exported[k], v, rtol=1e-5, atol=1e-6, msg=k)
    assert [e["loss"] for e in s["evals"]] == pytest.approx(ref_evals, **TOL)
    assert s["evals"][-1]["loss"] == pytest.approx(
        evaluate_reference(plain, val_x, val_y), rel=1e-6
    )

    for e in s["evals"]:
        assert e["tokens"] == 9 * 16
        # Negative, in the same run: the mean of per-rank means (shards of 5 and 4) is off.
        assert abs(e["mean_of_rank_means"] - e["loss"]) > 1e-5
        # Before reshard() the root holds gathered plain tensors; after it, DTensor shards again.
        assert e["root_sharded_before_reshard"] is False and e["root_sharded_after_reshard"] is True
    # Rank 1 had one batch fewer and ran one zero-weight forward to stay in step.
    assert s["padding_batches_per_rank"] == [[0, 0], [1, 1]]


def test_export_safetensors(tmp_path):
    st = pytest.importorskip("safetensors.torch", reason="the safetensors package is not installed")
    out = tmp_path / "out"
    s = (
        launch(
            copy_script("fsdp2_eval_export", tmp_path),
            ["--export", str(out), "--format", "safetensors", "--steps", "2"],
        )
        .check()
        .summary
    )
    mod = load_script("fsdp2_eval_export")
    plain = mod.Transformer(**json.loads((out / "config.json").read_text()))
    weights = st.load_file(str(out / "model.safetensors"))
    assert "output.weight" not in weights  # stored once, as tied weights are in safetensors files
    missing, unexpected = plain.load_state_dict(weights, strict=False)
    assert missing == ["output.weight"] and not unexpected
    assert sha256(plain.state_dict()) == s["export_sha256"]


# --------------------------------------------------------------------------
# diagnose.py
# --------------------------------------------------------------------------

# Small messages; medians of 5, and only a 50x outlier counts as slow, so a busy 2-core CI box
# cannot fail a clean run.
DIAG_ARGS = ["--size-mb", "1", "--iters", "5", "--slow-factor", "0.02"]


def test_diagnose_two_ranks_pass(tmp_path):
    """SKILL.md's command as written (from the repo: the other diagnose runs use the copy
    alone), with the variables a user debugging NCCL sets, which the report lists."""
    env = {"NCCL_DEBUG": "INFO", "TORCH_SHOW_CPP_STACKTRACES": "1"}
    res = run_skill_launch("diagnose.py", tmp_path, env=env)
    out = res.stdout
    assert "# torch.distributed diagnosis: PASS" in out and "None found." in out
    assert f"| torch | {torch.__version__} |" in out
    assert "2 rank(s) on 1 host(s)" in out and "backend gloo, device cpu" in out
    host = socket.gethostname()
    for r in (0, 1):  # launcher table: rank, host, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR:PORT
        assert re.search(
            rf"^\| {r} \| {re.escape(host)} \| {r} \| 2 \| [^|]+:\d+ \| 0 \|$", out, re.M
        ), out
    assert "- `NCCL_DEBUG=INFO`" in out and "- `TORCH_SHOW_CPP_STACKTRACES=1`" in out
    for check in ("barrier", "all_reduce", "all_gather", "reduce_scatter"):
        assert f"| {check} | ok |" in out
    assert "bus bandwidth" in out and "(from 1)" in out and "(from 0)" in out
    assert res.summary == {"script": "diagnose.py", "ok": True, "problems": [], "world_size": 2}
    assert res.stderr.count("Traceback") == 0


DIAG_JSON_ARGS = [
    "--size-mb",
    "1",
    "--iters",
    "5",
    "--slow-factor",
    "0.3",
    "--timeout-s",
    "60",
    "--json",
]


def test_diagnose_json_names_wrong_and_slow_rank(second_launch):
    """--json: one line for tools. Rank 1 sends corrupt all_gather data and stalls its matmul."""
    res = second_launch["test_diagnose_json_names_wrong_and_slow_rank"]
    assert res.returncode != 0
    lines = res.stdout.strip().splitlines()
    rep = json.loads(lines[-1])
    assert not any(ln.startswith("#") for ln in lines)  # no markdown in JSON mode
    assert rep["ok"] is False and [r["rank"] for r in rep["ranks"]] == [0, 1]
    assert {r["torch"] for r in rep["ranks"]} == {torch.__version__}
    kinds = {p["kind"]: p for p in rep["problems"]}
    assert set(kinds) == {"wrong", "slow"}, rep["problems"]
    assert (
        kinds["wrong"]["ranks"] == [1]
        and "all_gather: data from rank 1" in kinds["wrong"]["message"]
    )
    assert kinds["slow"]["ranks"] == [1] and "matmul" in kinds["slow"]["message"]
    assert {c["name"]: c["ok"] for c in rep["checks"]} == {
        "barrier": True,
        "all_reduce": True,
        "all_gather": False,
        "reduce_scatter": True,
    }


def test_diagnose_names_the_rank_that_skips_a_collective(tmp_path):
    """Rank 1 leaves out the all-reduce: rank 0 waits in it, and the report names rank 1 within the timeout."""
    timeout = 5
    t0 = time.monotonic()
    res = launch(
        copy_script("diagnose", tmp_path),
        DIAG_ARGS + ["--timeout-s", str(timeout), "--json"],
        env={"DIAGNOSE_TEST_FAULT": "skip:all_reduce:1"},
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert res.returncode != 0
    rep = json.loads(res.stdout.strip().splitlines()[-1])
    assert rep["ok"] is False and rep["hang"] == {"step": "all_reduce", "culprits": [1]}
    msg = rep["problems"][0]["message"]
    assert "rank 1 (host" in msg and "went on to all_gather" in msg, msg
    # Startup (two torch imports on two cores) plus the deadline, not a 2 x timeout wait or a hang.
    assert elapsed < 60 + 2 * timeout, elapsed


@pytest.mark.parametrize(
    "name",
    ["fsdp2_load_pretrained", "fsdp2_compile", "data_pipeline", "fsdp2_eval_export", "diagnose"],
)
def test_new_scripts_help_and_one_line_errors(name, capsys):
    mod = load_script(name)
    with pytest.raises(SystemExit) as exc:
        mod.parse_args(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "--device" in out and "--timeout-s" in out
    with pytest.raises(SystemExit) as exc:
        mod.parse_args(["--device", "tpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        exc.value.code == 2
        and len(err) == 1
        and "argument --device: invalid choice: 'tpu'" in err[0]
    ), err
