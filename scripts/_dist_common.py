"""Shared plumbing for the example scripts in this folder.

Each example keeps its parallelism technique in plain sight; this module only
holds what every one of them repeats: picking the device and backend,
starting and stopping the process group (also as a plain single process),
seeded data, a small transformer, the per-step log line, the final JSON
summary and one-line errors for a bad launch.

Copy this file next to any example you copy; it depends only on torch (not
numpy, which torch does not install).

Exit: after a run that used gloo, ``run`` ends the process with ``os._exit``
once the work is done and the group destroyed (see ``run`` for why).  That
skips ``atexit`` handlers, so a project that copies ``run`` and registers
its own (experiment trackers, profiler exports) should close them before
``main`` returns, or set ``DIST_EXAMPLES_CLEAN_EXIT=1``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

KNOWN_BACKENDS = ("gloo", "nccl", "xccl", "mpi", "ucc")


class LaunchError(Exception):
    """A problem with how the script was started; reported as one line."""


# --------------------------------------------------------------------------
# Arguments, device and backend
# --------------------------------------------------------------------------


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        # One line naming the problem, not argparse's usage block.
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


positive_int = _positive(int)
positive_float = _positive(float)


def base_parser(
    description: str, *, steps: int | None = 8, lr: float = 1e-2
) -> argparse.ArgumentParser:
    """Flags every example shares. steps=None: the script's data decides how many steps."""
    p = _OneLineParser(
        description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--device",
        default="auto",
        help="'auto' (the accelerator if present, else cpu), 'cpu', 'cuda', ...",
    )
    p.add_argument(
        "--backend",
        default="auto",
        help="'auto' (the default for the device: nccl on CUDA, gloo on CPU) or a name: "
        + ", ".join(KNOWN_BACKENDS),
    )
    if steps is not None:
        p.add_argument("--steps", type=positive_int, default=steps, help="optimizer steps")
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument(
        "--seed", type=int, default=0, help="weights use this seed; data adds the dp rank"
    )
    p.add_argument(
        "--timeout-s",
        type=positive_float,
        default=120.0,
        help="collective timeout, so a broken peer ends the run instead of hanging it",
    )
    return p


def world_size_from_env() -> int:
    """World size before the process group exists (1 when run as plain python)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as e:
        raise LaunchError(f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not an integer") from e


def pick_device(device_arg: str, local_rank: int) -> torch.device:
    if device_arg == "auto":
        acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        device_type = acc.type if acc is not None else "cpu"
    else:
        device_type = device_arg
    if device_type == "cpu":
        return torch.device("cpu")
    try:
        device = torch.device(device_type)
    except RuntimeError as e:
        raise LaunchError(f"unknown device {device_arg!r}") from e
    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if acc is None or acc.type != device.type:
        raise LaunchError(
            f"device {device_arg!r} is not available on this machine (use --device cpu)"
        )
    count = torch.accelerator.device_count()
    if local_rank >= count:
        raise LaunchError(
            f"LOCAL_RANK {local_rank} has no {device.type} device ({count} visible); "
            f"launch at most {count} processes per node"
        )
    torch.accelerator.set_device_index(local_rank)
    return torch.device(device.type, local_rank)


def pick_backend(backend_arg: str, device: torch.device) -> str:
    if backend_arg == "auto":
        return dist.get_default_backend_for_device(device)
    name = backend_arg.lower()
    if name not in KNOWN_BACKENDS:
        raise LaunchError(
            f"unknown backend {backend_arg!r}; choose one of: auto, " + ", ".join(KNOWN_BACKENDS)
        )
    if not dist.is_backend_available(name):
        raise LaunchError(f"backend {name!r} is not available in this torch build")
    if name == "nccl" and device.type != "cuda":
        raise LaunchError("backend 'nccl' needs --device cuda; use gloo on cpu")
    return name


def mesh_shape(world: int, names: tuple[str, str], outer: int, inner: int) -> tuple[int, int]:
    """Degrees of a 2-D (outer, inner) mesh; 0 means "fit the world size".

    Default inner degree: 2 on an even world size (2 ranks -> 1x2, 4 -> 2x2),
    else 1.  Checked before any process group exists, so a mismatch is a
    one-line error on every rank instead of a hang in a half-built mesh.
    """
    if outer < 0 or inner < 0:
        raise LaunchError(
            f"mesh degrees must be >= 1 (or 0 for auto), got {names[0]}={outer} {names[1]}={inner}"
        )
    if inner == 0:
        inner = world // outer if outer else (2 if world % 2 == 0 else 1)
    if outer == 0:
        outer = max(world // inner, 1)
    if outer * inner != world:
        raise LaunchError(
            f"{names[0]}={outer} x {names[1]}={inner} needs {outer * inner} ranks, "
            f"but the world size is {world}"
        )
    return outer, inner


# --------------------------------------------------------------------------
# Process group lifetime
# --------------------------------------------------------------------------


@dataclass
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    pg_backend: str = ""  # what init_process_group got, e.g. "cuda:nccl,cpu:gloo"
    launch: int = 1  # 1 on the first start, n on the (n-1)th restart; equal on all ranks

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def with_cpu_backend(spec: str) -> str:
    """``spec`` plus gloo for CPU tensors, unless a backend in it already serves them.

    "nccl" -> "cuda:nccl,cpu:gloo" (as torchtitan does for CPU offload);
    "gloo" and "cpu:gloo,cuda:nccl" stay as they are.
    """
    if ":" in spec:
        bound = dict(part.split(":", 1) for part in spec.split(","))
    else:
        bound = {dev: spec for dev in dist.Backend.backend_capability.get(spec.lower(), [])}
    if "cpu" in bound:
        return spec
    return ",".join(f"{dev}:{name}" for dev, name in bound.items()) + ",cpu:gloo"


def launch_number(store: dist.Store, rank: int, world: int) -> int:
    """How many times this rank has been started in this job, the same on every rank.

    Every rank bumps its own counter once per start, so the ranks of one
    start read the same number whichever agent restarted them.
    TORCHELASTIC_RESTART_COUNT cannot serve: it counts per agent, and an agent
    that restarts its workers because another node failed (a membership
    change) does not count that restart, so two nodes can disagree.  Keyed
    by world size too, so an elastic resize starts a fresh count.  A rank
    killed before it got here (during its imports) falls one behind: the next
    init then times out and the job fails, rather than mixing namespaces.
    """
    return store.add(f"examples/launch/{world}/{rank}", 1)


_GLOO_USED = False


@contextlib.contextmanager
def distributed(args: argparse.Namespace, *, cpu_collectives: bool = False) -> Iterator[Dist]:
    """Start the default process group; always destroy it on the way out.

    Under torchrun the env:// rendezvous variables are set.  As a plain
    ``python script.py`` there are none, so a private in-memory store gives a
    real world-size-1 group and every collective still runs.

    ``cpu_collectives``: the run also has collectives on CPU tensors (FSDP2
    CPU offload leaves gradients in host memory, and ``clip_grad_norm_``
    all-reduces their norms there), so the group gets a gloo backend for CPU
    next to NCCL, which serves CUDA tensors only.  Without it such a run
    fails at world size >= 2 with "No backend type associated with device
    type cpu"; at world size 1 nothing is communicated, so one GPU never shows it.
    """
    global _GLOO_USED
    world = world_size_from_env()
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(args.device, local_rank)
    backend = pick_backend(args.backend, device)
    spec = with_cpu_backend(backend) if cpu_collectives else backend
    _GLOO_USED = "gloo" in spec
    timeout = datetime.timedelta(seconds=args.timeout_s)
    # Binding the device lets NCCL set up communicators eagerly on one GPU.
    device_id = device if device.type != "cpu" else None
    if "MASTER_ADDR" in os.environ:
        # torchrun restarts workers against the same agent store, where the
        # previous start's peers left their addresses: the new group would
        # dial dead sockets (pytorch/pytorch#167288).  A per-start key prefix
        # gives every start a clean namespace; it must be the same on all
        # nodes, or init waits out the timeout (see launch_number).
        store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
        launch = launch_number(store, rank, world)
        dist.init_process_group(
            spec,
            store=dist.PrefixStore(f"launch_{launch}", store),
            rank=rank,
            world_size=world,
            timeout=timeout,
            device_id=device_id,
        )
    else:
        if world != 1:
            raise LaunchError(f"WORLD_SIZE={world} but no MASTER_ADDR; launch with torchrun")
        launch = 1
        dist.init_process_group(
            spec, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout, device_id=device_id
        )
    try:
        yield Dist(
            dist.get_rank(), dist.get_world_size(), local_rank, device, backend, spec, launch
        )
        # Tear down together: a rank that destroys its gloo group while a peer
        # is still using the connections can abort the peer at exit.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run(main: Callable[[Sequence[str] | None], None], argv: Sequence[str] | None = None) -> None:
    """Entry point wrapper: a bad launch becomes one line on stderr and exit code 2."""
    try:
        main(argv)
    except LaunchError as e:
        prefix = (
            f"[rank {os.environ['RANK']}] "
            if "RANK" in os.environ and world_size_from_env() > 1
            else ""
        )
        print(f"{prefix}error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    # The work is done and the process group destroyed. Under CPU contention, interpreter
    # teardown of torch 2.13's gloo threads sometimes aborts a rank ("terminate called
    # without an active exception", SIGABRT: 3 runs in 12 here), failing a finished job.
    # Skipping the teardown avoids it: 0 in 28. It also skips atexit handlers, so it is
    # done only where it is needed: a real command line (argv None; a caller running main
    # in-process keeps its interpreter) after a group with gloo in it. NCCL-only runs exit
    # normally; DIST_EXAMPLES_CLEAN_EXIT=1 asks for a normal exit always.
    if argv is None and _GLOO_USED and os.environ.get("DIST_EXAMPLES_CLEAN_EXIT") != "1":
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


# --------------------------------------------------------------------------
# Reproducibility and data
# --------------------------------------------------------------------------


def seed_weights(seed: int) -> None:
    """Same seed on every rank -> identical initial weights everywhere."""
    torch.manual_seed(seed)


def data_generator(seed: int, dp_rank: int, step: int, micro: int = 0) -> torch.Generator:
    """A fresh generator per (rank, step, micro-batch): any step's batch can be rebuilt
    on its own, which is what lets a resumed run continue exactly and lets the
    tests rebuild every rank's data for a reference."""
    g = torch.Generator()
    g.manual_seed(((seed * 1_000_003 + dp_rank) * 1_000_003 + step) * 101 + micro)
    return g


VOCAB, DIM, HEADS, LAYERS, SEQ = 64, 32, 4, 2, 16


def token_batch(
    seed: int,
    dp_rank: int,
    step: int,
    batch_size: int = 4,
    micro: int = 0,
    vocab: int = VOCAB,
    seq: int = SEQ,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Arithmetic sequences mod vocab: learnable (the loss falls) but not trivial,
    since the stride must be read from earlier tokens."""
    g = data_generator(seed, dp_rank, step, micro)
    start = torch.randint(0, vocab, (batch_size, 1), generator=g)
    stride = torch.randint(1, 8, (batch_size, 1), generator=g)
    tokens = (start + stride * torch.arange(seq + 1)) % vocab
    return tokens[:, :-1], tokens[:, 1:]


# --------------------------------------------------------------------------
# A small decoder-only transformer (torchtitan-like names: the TP plans refer to them)
# --------------------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds only its share of them.
        q, k, v = (
            w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden)
        self.w2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.attention_norm = nn.LayerNorm(dim)
        self.attention = Attention(dim, n_heads)
        self.ffn_norm = nn.LayerNorm(dim)
        self.feed_forward = FeedForward(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class ToyTransformer(nn.Module):
    def __init__(
        self,
        vocab: int = VOCAB,
        dim: int = DIM,
        n_heads: int = HEADS,
        n_layers: int = LAYERS,
        max_seq: int = SEQ,
    ):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.pos_embeddings = nn.Embedding(max_seq, dim)
        # A ModuleDict keeps block names stable ("layers.0") for checkpoints and plans.
        self.layers = nn.ModuleDict({str(i): Block(dim, n_heads) for i in range(n_layers)})
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        # A buffer, as real models have (RoPE tables): not a parameter, so FSDP
        # neither shards nor offloads it, and it is not in the state dict.
        self.register_buffer("positions", torch.arange(max_seq), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens) + self.pos_embeddings(self.positions[: tokens.shape[1]])
        for block in self.layers.values():
            h = block(h)
        return self.output(self.norm(h))

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Deterministic init that also works after ``to_empty`` on a meta-built
        model: every parameter is rewritten, in a fixed order, from one seed,
        and the buffer too (``to_empty`` leaves it uninitialised)."""
        g = torch.Generator(device="cpu").manual_seed(seed)
        for name, p in sorted(self.named_parameters()):
            if name.endswith("bias"):
                new = torch.zeros(p.shape)
            elif "norm" in name:
                new = torch.ones(p.shape)
            else:
                new = torch.randn(p.shape, generator=g) * 0.02
            copy_full_into(p, new)
        self.positions.copy_(torch.arange(self.positions.numel(), device=self.positions.device))


def copy_full_into(p: torch.Tensor, full: torch.Tensor) -> None:
    """Copy a full (unsharded) CPU tensor into a plain or DTensor parameter."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(p, DTensor):
        # src_data_rank=None: every rank holds the same full tensor, so each slices its
        # own shard locally instead of receiving it from rank 0 (one scatter per parameter).
        full = distribute_tensor(
            full.to(p.device_mesh.device_type), p.device_mesh, p.placements, src_data_rank=None
        )
        p.to_local().copy_(full.to_local())
    else:
        p.copy_(full.to(p.device))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def exact_fp32() -> None:
    """Turn TF32 off for CUDA matmuls and cuDNN, for comparisons at 1e-5.

    TF32 keeps 10 mantissa bits; an environment that enabled it
    (``torch.set_float32_matmul_precision("high")``) would fail a parity check
    with no hint.  torch 2.13 has two APIs for this and raises when code later
    *reads* a flag after the two were mixed (inductor reads
    ``get_float32_matmul_precision``).  These legacy setters left every getter
    readable whichever API had enabled TF32 before; only after the generic
    ``torch.backends.fp32_precision = "tf32"`` do cuDNN convolutions keep TF32.
    """
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False


def fp32_precision() -> dict[str, str]:
    """The fp32 math mode in effect, for the summary: "ieee" or "tf32" ("none" for
    matmuls: the default, full fp32 unless ``torch.backends.fp32_precision`` says otherwise)."""
    try:
        cudnn = "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
    except RuntimeError:  # legacy and new API mixed: the per-op setting is still readable
        cudnn = torch.backends.cudnn.conv.fp32_precision
    return {"cuda_matmul": torch.backends.cuda.matmul.fp32_precision, "cudnn": cudnn}


# --------------------------------------------------------------------------
# Parity with a replicated reference (the way PyTorch's FSDP tests do it)
# --------------------------------------------------------------------------


def _clean(name: str) -> str:
    # Activation-checkpoint wrappers add this segment to parameter names only.
    return name.replace("_checkpoint_wrapped_module.", "")


@torch.no_grad()
def max_shard_diff(model: nn.Module, ref: nn.Module, grads: bool = False) -> float:
    """Largest |local shard - same slice of the replicated reference|.

    The reference tensor is cut with the parameter's own placements, so this
    works for any mesh: FSDP, HSDP, TP and 2-D alike.
    """
    from torch.distributed.tensor import DTensor, distribute_tensor

    ref_params = {_clean(n): p for n, p in ref.named_parameters()}
    worst = 0.0
    for name, p in model.named_parameters():
        r = ref_params[_clean(name)]
        a, b = (p.grad, r.grad) if grads else (p, r)
        if a is None and b is None:
            continue
        if isinstance(a, DTensor):
            b = distribute_tensor(
                b.detach().to(a.device_mesh.device_type), a.device_mesh, a.placements
            )
            a, b = a.to_local(), b.to_local()
        worst = max(worst, (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item())
    return worst


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def mean_across_ranks(value: torch.Tensor, group=None) -> float:
    """The global loss: each rank's local mean, averaged (equal batch sizes)."""
    v = value.detach().float().reshape(1).clone()
    dist.all_reduce(v, op=dist.ReduceOp.SUM, group=group)
    return v.item() / dist.get_world_size(group)


def log_step(d: Dist, step: int, loss: float, **extra: object) -> None:
    if d.is_main:
        tail = "".join(f" {k}={v}" for k, v in extra.items())
        print(f"step {step:4d}  loss {loss:.6f}{tail}", flush=True)


def peak_memory(d: Dist) -> dict[str, list[int]]:
    """Per-rank peak accelerator memory (bytes) since the start; {} on CPU. A collective.

    Allocated is what tensors held; reserved is what the caching allocator
    took from the driver, and fragmentation shows up there first, so an OOM
    can come with allocated well below the card's size.
    """
    if d.device.type != "cuda":
        return {}
    mine = torch.tensor(
        [torch.cuda.max_memory_allocated(d.device), torch.cuda.max_memory_reserved(d.device)],
        dtype=torch.float64,
        device=d.device,
    )
    every = torch.zeros(d.world_size, 2, dtype=torch.float64, device=d.device)
    dist.all_gather_into_tensor(every, mine)
    return {
        "peak_mem_allocated_bytes": [int(v) for v in every[:, 0].tolist()],
        "peak_mem_reserved_bytes": [int(v) for v in every[:, 1].tolist()],
    }


def summary(d: Dist, script: str, losses: list[float], steps: int, **extra: object) -> None:
    """The last stdout line on rank 0: one JSON object for tests and tools.

    Every rank must call it (on CUDA it gathers the peak memory of all ranks).
    """
    mem = peak_memory(d)
    if d.is_main:
        rec = {
            "script": os.path.basename(script),
            "world_size": d.world_size,
            "backend": d.backend,
            "pg_backend": d.pg_backend,
            "launch": d.launch,
            "device": d.device.type,
            "steps": steps,
            "losses": losses,
            "fp32_precision": fp32_precision(),
            **mem,
            **extra,
        }
        print(json.dumps(rec, sort_keys=True), flush=True)


def require_numpy(what: str) -> None:
    """One line instead of a deep traceback when numpy is missing but torch needs it.

    torch does not install numpy, yet in torch 2.13 its object collectives
    (``all_gather_object``, ``broadcast_object_list``, ``gather_object``, which
    ``dcp.save`` and ``dcp.load`` use for their plans) unpickle through
    ``Tensor.numpy()`` (``distributed_c10d._tensor_to_object``).
    """
    try:
        torch.zeros(1).numpy()
    except RuntimeError:
        raise LaunchError(
            f"numpy is needed for {what} (torch's object collectives call "
            "Tensor.numpy()); pip install numpy"
        ) from None


def tensor_bytes(t: torch.Tensor) -> bytes:
    """A tensor's raw bytes with torch alone (``.numpy()`` needs numpy, which torch
    does not install). The clone owns a storage of exactly the tensor's size; a
    view's storage can be larger."""
    flat = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).clone()
    return bytes(flat.untyped_storage())


def state_digest(model, opt) -> str | None:
    """SHA-256 over the gathered (unsharded) model and optimizer state; rank 0 only, None
    elsewhere. A collective: every rank must call it. Tests compare runs with it."""
    import hashlib

    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd, optim_sd = get_state_dict(model, opt, options=opts)  # collective
    if dist.get_rank() != 0:
        return None
    h = hashlib.sha256()
    flat = {f"model.{k}": v for k, v in model_sd.items()}
    for fqn, st in optim_sd["state"].items():
        flat.update({f"optim.{fqn}.{k}": v for k, v in st.items()})
    for k in sorted(flat):
        h.update(k.encode())
        h.update(tensor_bytes(torch.as_tensor(flat[k])))
    return h.hexdigest()


# -- checkpoints from disk ----------------------------------------------------------------


def refuse_untrusted_checkpoint(path: str) -> None:
    """Refuse a checkpoint folder that someone other than this user could have written.

    Loading a DCP checkpoint runs code from it: ``dcp.load`` unpickles ``.metadata``
    (``FileSystemReader.read_metadata`` calls ``pickle.load``) and ``torch.load``s byte
    entries with ``weights_only=False``. A checkpoint is therefore only as trustworthy as
    whoever can write it, so the folder and every file and folder in it must be owned by
    this user and carry no group or other write bit. Self-contained (no import of the
    skill's package) so the script still works when copied on its own.
    """
    if not hasattr(os, "geteuid"):  # no POSIX owners or modes to check (Windows)
        return
    uid = os.geteuid()
    for dirpath, dirnames, filenames in os.walk(path):
        for p in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
            try:
                st = os.stat(p)  # follows symlinks: what torch would open
            except OSError as e:
                raise LaunchError(f"checkpoint {path}: cannot check {p}: {e.strerror}") from None
            if st.st_uid != uid:
                raise LaunchError(
                    f"refusing checkpoint {path}: {p} is owned by uid {st.st_uid}, not by you "
                    f"(uid {uid}); loading a checkpoint runs pickled code from it"
                )
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                who = "its group" if not st.st_mode & stat.S_IWOTH else "other users"
                raise LaunchError(
                    f"refusing checkpoint {path}: {p} is writable by {who}, and loading a "
                    f"checkpoint runs pickled code from it (if you trust it: chmod -R go-w {path})"
                )


def seal_checkpoint(path: str) -> None:
    """Clear the group and other write bits of a checkpoint this process just saved.

    Under a permissive umask (0002) DCP's files come out group-writable, and
    ``refuse_untrusted_checkpoint`` would then refuse this user's own checkpoint.
    """
    if not hasattr(os, "geteuid"):
        return
    for dirpath, dirnames, filenames in os.walk(path):
        for p in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
            try:
                st = os.lstat(p)
                if (
                    st.st_uid == os.geteuid()
                    and not stat.S_ISLNK(st.st_mode)
                    and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                ):
                    os.chmod(p, stat.S_IMODE(st.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
            except OSError:
                pass  # another rank's file on a local disk, or one just renamed: not ours to fix
