#!/usr/bin/env python
"""Distributed checkpointing (DCP) of an FSDP2 model and its optimizer.

    # train 3 steps on 2 ranks, save; resume on 1 rank (resharding), save again
    torchrun --nproc-per-node 2 scripts/dcp_checkpoint.py --steps 3 --save ckpt/a
    python scripts/dcp_checkpoint.py --load ckpt/a --steps 2 --save ckpt/b
    # back to 2 ranks, with an asynchronous save and a full export
    torchrun --nproc-per-node 2 scripts/dcp_checkpoint.py --load ckpt/b --steps 2 \\
        --save ckpt/c --async-save --export-full model.safetensors

What it shows:
- ``get_state_dict(model, optimizer)`` returns *sharded* state dicts (DTensor
  values, optimizer state keyed by parameter name), ``dcp.save`` writes each
  rank's shards in parallel plus one ``.metadata`` file;
- ``dcp.load`` reads into the state dict you pass in, so it reshards: a
  checkpoint saved on 2 ranks loads on 1 rank (or 4) without conversion;
  ``set_state_dict`` then puts the values into model and optimizer;
- ``dcp.async_save`` stages a copy of the state and writes it in a background
  thread while training continues; wait on the future before the next save;
- ``StateDictOptions(full_state_dict=True, cpu_offload=True)`` gathers an
  unsharded copy on rank 0 for a consumer without torch.distributed; it is
  written as safetensors (a JSON header plus raw bytes, no pickle).

The summary reports SHA-256 digests of the full model and optimizer state
right after loading and right at saving, so a test can prove that resharding
round-trips bit for bit.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _dist_common as common  # this folder's shared plumbing: copy it along with this file
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def build(args, d: common.Dist):
    mesh = init_device_mesh(d.device.type, (d.world_size,), mesh_dim_names=("dp_shard",))
    model = common.ToyTransformer().to(d.device)
    model.init_weights(args.seed)
    for block in model.layers.values():
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=args.lr)


def load_checkpoint(path: str, model, opt) -> int:
    """Load model + optimizer from any world size's checkpoint; return the next step."""
    if not os.path.isfile(os.path.join(path, ".metadata")):
        raise common.LaunchError(f"--load {path}: not a DCP checkpoint (no .metadata)")
    # dcp.load unpickles the checkpoint: refuse one another user could have written.
    common.refuse_untrusted_checkpoint(path)
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd, "trainer": {"next_step": 0}}
    dcp.load(state, checkpoint_id=path)  # in place: each rank reads its new shards
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(state["trainer"]["next_step"])


def save_state(model, opt, next_step: int):
    model_sd, optim_sd = get_state_dict(model, opt)
    return {"model": model_sd, "optim": optim_sd, "trainer": {"next_step": next_step}}


_ST_DTYPES = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
}


def write_safetensors(state: dict[str, torch.Tensor], path: str) -> None:
    """Minimal safetensors writer: 8-byte header size, JSON header, raw bytes.
    Written to a temp name and renamed, so a reader never sees half a file."""
    header, blobs, offset = {}, [], 0
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        raw = common.tensor_bytes(t)  # not .numpy(): torch does not install numpy
        header[name] = {
            "dtype": _ST_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format aligns the data to 8 bytes
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def export_full(model, path: str) -> None:
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full = get_model_state_dict(model, options=opts)  # collective; rank 0 gets the tensors
    if dist.get_rank() == 0:
        write_safetensors(full, path)


def main(argv=None) -> None:
    p = common.base_parser(__doc__.splitlines()[0], steps=3, lr=1e-2)
    p.add_argument("--batch-size", type=common.positive_int, default=4, help="per rank")
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--load", metavar="DIR", help="resume from this DCP checkpoint (any world size)")
    p.add_argument("--save", metavar="DIR", help="save a DCP checkpoint here after training")
    p.add_argument(
        "--async-save",
        action="store_true",
        help="save with dcp.async_save, halfway through the steps, while training continues",
    )
    p.add_argument(
        "--export-full", metavar="FILE", help="also write the unsharded model as safetensors"
    )
    args = p.parse_args(argv)
    if args.async_save and not args.save:
        raise common.LaunchError("--async-save needs --save DIR")
    common.require_numpy("dcp.save and dcp.load")

    with common.distributed(args) as d:
        model, opt = build(args, d)
        start, loaded_digest = 0, None
        if args.load:
            start = load_checkpoint(args.load, model, opt)
            loaded_digest = common.state_digest(model, opt)

        # Async checkpointing runs its collectives on a separate gloo group so
        # they never queue behind training collectives (NCCL) on the device.
        ckpt_pg = dist.new_group(backend="gloo") if args.async_save else None
        pending, saved_digest = None, None
        save_after = start + (args.steps // 2 if args.async_save else args.steps) - 1
        losses = []
        for step in range(start, start + args.steps):
            x, y = (
                t.to(d.device) for t in common.token_batch(args.seed, d.rank, step, args.batch_size)
            )
            loss = common.lm_loss(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(common.mean_across_ranks(loss))
            common.log_step(d, step, losses[-1])
            if args.save and step == save_after:
                saved_digest = common.state_digest(model, opt)
                state = save_state(model, opt, step + 1)
                if args.async_save:
                    # Returns once the state is staged; the write overlaps the next steps.
                    pending = dcp.async_save(state, checkpoint_id=args.save, process_group=ckpt_pg)
                else:
                    dcp.save(state, checkpoint_id=args.save)
                    common.seal_checkpoint(args.save)
        if pending is not None:
            pending.result()  # the checkpoint is complete only after this
            common.seal_checkpoint(args.save)
        if args.export_full:
            export_full(model, args.export_full)
        common.summary(
            d,
            __file__,
            losses,
            args.steps,
            start_step=start,
            loaded_digest=loaded_digest,
            saved_digest=saved_digest,
            saved_next_step=save_after + 1 if args.save else None,
            final_digest=common.state_digest(model, opt),
        )


if __name__ == "__main__":
    common.run(main)
