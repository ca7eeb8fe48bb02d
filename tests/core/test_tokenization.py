from fsdp_skill.index.tokenization import tokenize


def test_identifiers_kept_whole_and_split():
    toks = tokenize("torch.distributed.fsdp.fully_shard")
    assert toks[0] == "torch.distributed.fsdp.fully_shard"
    assert {"fully_shard", "fully", "shard", "fsdp", "distributed"} <= set(toks)


def test_camel_case_parts_and_acronyms():
    assert set(tokenize("FullyShardedDataParallel")) >= {
        "fullyshardeddataparallel",
        "fully",
        "sharded",
        "data",
        "parallel",
    }
    assert set(tokenize("powerSGD_hook")) >= {"powersgd_hook", "powersgd", "power", "sgd", "hook"}
    assert tokenize("DDP") == ["ddp"]


def test_stopwords_plurals_and_punctuation():
    assert tokenize("How do I compress the gradients?") == ["compress", "gradient"]
    assert tokenize("hangs") == ["hang"] and tokenize("policies") == ["policy"]
    # API words that merely look inflected survive.
    assert tokenize("padding process") == ["padding", "process"]


def test_env_vars_and_flags():
    assert set(tokenize("NCCL_DEBUG=INFO --nproc-per-node")) >= {
        "nccl_debug",
        "nccl",
        "debug",
        "info",
        "nproc",
        "node",
    }


def test_query_path_imports_no_re():
    import subprocess
    import sys

    code = "import sys; import fsdp_skill.search.engine, fsdp_skill.search.cli; print('re' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
