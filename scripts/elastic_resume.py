#!/usr/bin/env python
"""Fault-tolerant training: DCP checkpoints every N steps, resume after a restart.

    torchrun --nproc-per-node 2 --max-restarts 3 scripts/elastic_resume.py --ckpt-dir ckpt
    # inject a crash on rank 1 at step 5 (first attempt only) and watch it resume:
    torchrun --nproc-per-node 2 --max-restarts 1 scripts/elastic_resume.py \\
        --ckpt-dir ckpt --fail-at-step 5

When any worker dies, torchrun (the elastic agent) stops the others and, up to
``--max-restarts`` times, starts them all again (on several nodes every
agent restarts its workers; the process group's store namespace comes from
a launch number all nodes agree on, see ``_dist_common.launch_number``).
Restarting is only useful if the script picks up where it left off, exactly:

- checkpoints are committed atomically: every rank writes into
  ``step_N.tmp``, then, after a barrier, rank 0 renames it to ``step_N``; a
  directory without ``.tmp`` is therefore complete, and a crash mid-save
  leaves only a ``.tmp`` that the next attempt deletes;
- the checkpoint holds model, optimizer *and* the loop state (next step, the
  loss history); data for a step is a pure function of (seed, rank, step), so
  the resumed run sees exactly the batches the lost one would have;
- on start, the latest complete checkpoint is loaded (or none: step 0).

Steps after the last checkpoint are recomputed, each applied to the weights
exactly once, so on CPU the final weights equal an uninterrupted run's bit for
bit (the summary's ``final_digest``).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _dist_common as common  # this folder's shared plumbing: copy it along with this file
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

CKPT = re.compile(r"^step_(\d{6})$")


def latest_checkpoint(root: str) -> str | None:
    """Highest-numbered *committed* checkpoint (``.tmp`` ones never match)."""
    if not os.path.isdir(root):
        return None
    done = sorted(
        n
        for n in os.listdir(root)
        if CKPT.match(n) and os.path.isfile(os.path.join(root, n, ".metadata"))
    )
    return os.path.join(root, done[-1]) if done else None


def save_checkpoint(root: str, next_step: int, state: dict, keep: int) -> None:
    final = os.path.join(root, f"step_{next_step:06d}")
    tmp = final + ".tmp"
    dcp.save(state, checkpoint_id=tmp)
    maybe_fail("save", next_step - 1)
    common.seal_checkpoint(tmp)  # each rank after its own shards are written, before the commit
    dist.barrier()  # every rank's shards are on disk
    if dist.get_rank() == 0:
        os.replace(tmp, final)  # the commit: atomic on one filesystem
        for old in sorted(n for n in os.listdir(root) if CKPT.match(n))[:-keep]:
            shutil.rmtree(os.path.join(root, old), ignore_errors=True)
    dist.barrier()  # nobody races ahead to a state that might not be committed


def remove_partial_checkpoints(root: str) -> list[str]:
    """Rank 0 deletes what a crashed attempt left half-written."""
    stale = []
    if dist.get_rank() == 0 and os.path.isdir(root):
        stale = sorted(n for n in os.listdir(root) if n.endswith(".tmp"))
        for n in stale:
            shutil.rmtree(os.path.join(root, n), ignore_errors=True)
    dist.barrier()
    return stale


_FAIL: dict = {}


def maybe_fail(where: str, step: int) -> None:
    """Injected crash for the fault test: first start only, one rank, hard exit."""
    # The launch number, not TORCHELASTIC_RESTART_COUNT: on several nodes that count is
    # per agent, and the agents of healthy nodes keep 0 when they restart theirs.
    if _FAIL.get("where") != where or _FAIL.get("step") != step or _FAIL.get("launch") != 1:
        return
    if dist.get_rank() == _FAIL.get("rank"):
        print(f"[rank {dist.get_rank()}] injected failure at step {step} ({where})", flush=True)
        os._exit(13)  # no cleanup, like a killed process
    # NCCL peers of a dead rank hang in their next collective, so their agent restarts them
    # for the membership change (not counted as a restart); gloo peers would error out at once.
    time.sleep(_FAIL.get("hang_s", 0.0))


def main(argv=None) -> None:
    p = common.base_parser(__doc__.splitlines()[0], steps=8, lr=1e-2)
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument(
        "--ckpt-every", type=common.positive_int, default=3, help="steps between checkpoints"
    )
    p.add_argument(
        "--keep", type=common.positive_int, default=2, help="committed checkpoints to keep"
    )
    p.add_argument("--batch-size", type=common.positive_int, default=4, help="per rank")
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument(
        "--fail-at-step", type=int, default=-1, help="inject a crash at this step (first attempt)"
    )
    p.add_argument("--fail-rank", type=int, default=1)
    p.add_argument(
        "--fail-hang-s",
        type=float,
        default=0.0,
        help="the other ranks wait this long at the injected failure, as NCCL ranks hang",
    )
    p.add_argument(
        "--fail-in",
        choices=["step", "save"],
        default="step",
        help="crash during the step's backward, or during its checkpoint (after the "
        "shards are written, before the commit)",
    )
    args = p.parse_args(argv)
    _FAIL.update(
        where=args.fail_in, step=args.fail_at_step, rank=args.fail_rank, hang_s=args.fail_hang_s
    )
    common.require_numpy("dcp.save and dcp.load")

    with common.distributed(args) as d:
        _FAIL["launch"] = d.launch
        mesh = init_device_mesh(d.device.type, (d.world_size,), mesh_dim_names=("dp_shard",))
        model = common.ToyTransformer().to(d.device)
        model.init_weights(args.seed)
        for block in model.layers.values():
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

        if d.is_main:
            os.makedirs(args.ckpt_dir, exist_ok=True)
        removed = remove_partial_checkpoints(args.ckpt_dir)
        # Every rank must agree on what to load: rank 0 decides.
        found = [latest_checkpoint(args.ckpt_dir) if d.is_main else None]
        dist.broadcast_object_list(found, src=0)
        start, history = 0, []
        if found[0]:
            # dcp.load unpickles the checkpoint, and any step_* folder in --ckpt-dir is picked
            # up: refuse one another user could have written (or planted) before reading it.
            common.refuse_untrusted_checkpoint(found[0])
            model_sd, optim_sd = get_state_dict(model, opt)
            state = {
                "model": model_sd,
                "optim": optim_sd,
                "trainer": {"next_step": 0, "losses": []},
            }
            dcp.load(state, checkpoint_id=found[0])
            set_state_dict(
                model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"]
            )
            start, history = int(state["trainer"]["next_step"]), list(state["trainer"]["losses"])
            if d.is_main:
                print(f"resumed from {found[0]} at step {start}", flush=True)

        for step in range(start, args.steps):
            x, y = (
                t.to(d.device) for t in common.token_batch(args.seed, d.rank, step, args.batch_size)
            )
            loss = common.lm_loss(model(x), y)
            maybe_fail("step", step)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            history.append(common.mean_across_ranks(loss))
            common.log_step(d, step, history[-1])
            if (step + 1) % args.ckpt_every == 0 or step + 1 == args.steps:
                model_sd, optim_sd = get_state_dict(model, opt)
                save_checkpoint(
                    args.ckpt_dir,
                    step + 1,
                    {
                        "model": model_sd,
                        "optim": optim_sd,
                        "trainer": {"next_step": step + 1, "losses": list(history)},
                    },
                    args.keep,
                )

        # Per rank: agents count restarts separately, so on several nodes these can differ.
        counts = torch.zeros(d.world_size, dtype=torch.int64, device=d.device)
        counts[d.rank] = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        dist.all_reduce(counts)
        common.summary(
            d,
            __file__,
            history,
            args.steps,
            resumed_from=found[0],
            start_step=start,
            restart_count=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
            restart_counts=counts.tolist(),
            removed_partial=removed,
            final_digest=common.state_digest(model, opt),
        )


if __name__ == "__main__":
    common.run(main)
