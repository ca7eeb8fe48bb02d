"""Curated query expansion: the field's vocabulary -> the API words its docs use.

Users describe symptoms ("hangs", "OOM", "uneven inputs") or other frameworks' names ("ZeRO-3",
"gradient accumulation"); the docs name APIs (`Join`, `FULL_SHARD`, `no_sync`). Each rule adds
the API words at a lower weight than the user's own words, so an exact match still wins.
"""

from fsdp_skill.index.tokenization import STOPWORDS, tokenize

WEIGHT = 0.4

# (phrase as the user writes it, words the relevant docs use). A phrase matches when all its
# tokens occur in the query, in any order.
RULES = [
    ("uneven", "Join Joinable join_hook throw_on_early_termination"),
    ("different number of batches", "Join Joinable throw_on_early_termination"),
    ("fewer batches", "Join Joinable throw_on_early_termination"),
    ("run out of data", "Join Joinable throw_on_early_termination"),
    ("zero-3", "FULL_SHARD fully_shard reshard_after_forward"),
    ("zero 3", "FULL_SHARD fully_shard reshard_after_forward"),
    ("zero-2", "SHARD_GRAD_OP reshard_after_forward"),
    ("zero 2", "SHARD_GRAD_OP reshard_after_forward"),
    ("zero-1", "ZeroRedundancyOptimizer"),
    ("zero", "ZeroRedundancyOptimizer"),
    ("optimizer state sharding", "ZeroRedundancyOptimizer"),
    ("shard optimizer", "ZeroRedundancyOptimizer"),
    ("gradient accumulation", "no_sync set_requires_gradient_sync"),
    ("accumulate gradients", "no_sync set_requires_gradient_sync"),
    ("skip allreduce", "no_sync set_requires_gradient_sync"),
    ("oom", "activation checkpointing CPUOffload offload reshard_after_forward memory"),
    ("out of memory", "activation checkpointing CPUOffload offload reshard_after_forward"),
    ("hang", "timeout TORCH_DISTRIBUTED_DEBUG monitored_barrier NCCL_DEBUG"),
    ("hangs", "timeout TORCH_DISTRIBUTED_DEBUG monitored_barrier NCCL_DEBUG"),
    ("stuck", "timeout TORCH_DISTRIBUTED_DEBUG monitored_barrier"),
    ("deadlock", "timeout monitored_barrier"),
    ("timeout", "init_process_group timeout"),
    ("mixed precision", "MixedPrecision MixedPrecisionPolicy param_dtype reduce_dtype"),
    ("bf16", "MixedPrecisionPolicy param_dtype reduce_dtype"),
    ("fp16", "MixedPrecision ShardedGradScaler"),
    ("grad scaler", "ShardedGradScaler"),
    ("gradient clipping", "clip_grad_norm_ get_total_norm clip_grads_with_norm_"),
    ("clip gradients", "clip_grad_norm_ get_total_norm"),
    ("save checkpoint", "dcp save state_dict get_state_dict"),
    ("load checkpoint", "dcp load set_state_dict"),
    ("full state dict", "FULL_STATE_DICT full_state_dict StateDictOptions cpu_offload"),
    ("consolidate", "full_state_dict FULL_STATE_DICT consolidate_state_dict"),
    ("resume", "load set_state_dict"),
    ("different world size", "reshard dcp load"),
    ("activation checkpointing", "checkpoint_wrapper apply_activation_checkpointing checkpoint"),
    ("gradient checkpointing", "checkpoint_wrapper apply_activation_checkpointing checkpoint"),
    ("recompute", "checkpoint activation"),
    ("launch", "torchrun"),
    ("multi node", "torchrun rdzv nnodes"),
    ("multinode", "torchrun rdzv nnodes"),
    ("multiple nodes", "torchrun rdzv nnodes"),
    ("local rank", "LOCAL_RANK torchrun"),
    ("fault tolerant", "torchrun max_restarts elastic"),
    ("restart", "max_restarts torchrun elastic"),
    ("compress gradients", "comm_hook powerSGD_hook fp16_compress_hook"),
    ("gradient compression", "comm_hook powerSGD_hook fp16_compress_hook"),
    ("hybrid", "HYBRID_SHARD init_device_mesh replicate"),
    ("hsdp", "HYBRID_SHARD init_device_mesh replicate fully_shard"),
    ("2d parallel", "init_device_mesh parallelize_module fully_shard"),
    ("tensor parallel", "parallelize_module ColwiseParallel RowwiseParallel"),
    ("sequence parallel", "SequenceParallel"),
    ("unused parameters", "find_unused_parameters static_graph"),
    ("wrap", "auto_wrap_policy transformer_auto_wrap_policy"),
    ("frozen", "requires_grad use_orig_params ignored_params"),
    ("sampler", "DistributedSampler set_epoch"),
    ("shuffle", "DistributedSampler set_epoch"),
    ("all reduce", "all_reduce"),
    ("allreduce", "all_reduce"),
    ("all gather", "all_gather all_gather_into_tensor"),
    ("allgather", "all_gather all_gather_into_tensor"),
    ("broadcast", "broadcast broadcast_object_list"),
    ("reduce scatter", "reduce_scatter_tensor"),
    ("sync", "barrier"),
    ("meta device", "to_empty reset_parameters init"),
    ("cpu offload", "CPUOffload CPUOffloadPolicy offload_policy"),
    (
        "prefetch",
        "set_modules_to_forward_prefetch set_modules_to_backward_prefetch backward_prefetch forward_prefetch",
    ),
    ("process group", "new_group init_process_group ProcessGroup"),
    ("subgroup", "new_group new_subgroups"),
    ("backend", "Backend init_process_group nccl gloo"),
    ("nccl", "NCCL Backend"),
    ("gloo", "gloo Backend"),
    ("dtensor", "DTensor distribute_tensor full_tensor"),
    ("device mesh", "DeviceMesh init_device_mesh"),
    ("object", "broadcast_object_list all_gather_object"),
    ("async checkpoint", "async_save"),
    ("background", "async_save"),
    ("average", "all_reduce ReduceOp"),
    ("mean across", "all_reduce ReduceOp"),
    ("sum across", "all_reduce ReduceOp"),
    ("per node", "new_subgroups new_group"),
    ("each node", "new_subgroups new_group"),
    ("per machine", "new_subgroups new_group"),
    ("different sizes", "all_gather_object all_gather"),
    ("different size", "all_gather_object all_gather"),
    ("variable size", "all_gather_object all_gather"),
    ("python object", "broadcast_object_list all_gather_object"),
    ("not initialized", "init_process_group"),
    ("destroy", "destroy_process_group"),
    ("generate", "summon_full_params register_fsdp_forward_method"),
    ("full params", "summon_full_params"),
    ("model parallel", "parallelize_module pipeline"),
]

_COMPILED: dict[tuple[str, str], tuple[frozenset[str], list[str]]] = {}


def _compiled(rule: tuple[str, str]) -> tuple[frozenset[str], list[str]]:
    """(phrase tokens, expansion tokens) of a rule, tokenized on first use."""
    if rule not in _COMPILED:
        phrase, words = rule
        # Only each word's whole token: the parts of `reshard_after_forward` ("forward"...)
        # would match far more than the API itself.
        _COMPILED[rule] = (
            frozenset(tokenize(phrase)),
            [t for w in words.split() for t in tokenize(w)[:1]],
        )
    return _COMPILED[rule]


def expand(query: str, terms: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Extra (term, weight) pairs for the rules whose phrase occurs in the query."""
    have = {t for t, _ in terms}
    lowered = query.lower()
    extra, added = [], set()
    for rule in RULES:
        # Cheap pre-filter before tokenizing the rule (a query runs once per process, so
        # tokenizing all rules would cost more than the search itself).
        if not all(w[:4] in lowered for w in rule[0].split() if w not in STOPWORDS):
            continue
        phrase, words = _compiled(rule)
        if phrase and phrase <= have:
            for w in words:
                if w not in have and w not in added:
                    added.add(w)
                    extra.append((w, WEIGHT))
    return extra
