"""Answer coverage (eval --answers), traceback queries and the budgeted output."""

import pytest

from fsdp_skill.eval import QuestionFileError, _norm, evaluate_answers, fact_covered, load_questions
from fsdp_skill.search.engine import _guides_first, _strip_log_prefix, condense_query
from fsdp_skill.search.render import excerpt, render_markdown

FACT = {
    "fact": "static_graph only for a fixed unused set",
    "terms": [["static_graph"], ["same", "every iteration", "fixed"]],
}


def test_fact_needs_every_group_and_any_alternative():
    assert fact_covered(FACT, _norm("Use STATIC_GRAPH=True when the same\n  params are unused"))
    assert fact_covered(FACT, _norm("static_graph ... fixed set"))
    assert not fact_covered(FACT, _norm("use static_graph=True"))  # one group missing
    assert not fact_covered(FACT, _norm("the same parameters every time"))  # the other missing


def test_markdown_marks_do_not_hide_a_stated_fact():
    fact = {"fact": "shard after resizing", "terms": [["before fully_shard"], ["be none"]]}
    assert fact_covered(fact, _norm("Resize *before* `fully_shard`; it must be ``None``."))
    assert not fact_covered(fact, _norm("Resize after `fully_shard`; it must be ``None``."))


def test_answer_metrics_per_kind_and_topic():
    qs = [
        {
            "id": "a",
            "question": "qa",
            "topic": "ddp",
            "kind": "error",
            "relevant": ["x"],
            "answer_facts": [FACT, {"fact": "f", "terms": [["find_unused_parameters"]]}],
        },
        {
            "id": "b",
            "question": "qb",
            "topic": "fsdp2",
            "kind": "howto",
            "relevant": ["x"],
            "answer_facts": [{"fact": "g", "terms": [["set_requires_gradient_sync"]]}],
        },
        {"id": "c", "question": "qc", "topic": "ddp", "relevant": ["x"]},
    ]  # no facts: not counted
    outputs = {"qa": "find_unused_parameters=True", "qb": "call set_requires_gradient_sync(False)"}
    rep = evaluate_answers(qs, lambda q: outputs[q])
    g = rep["groups"]
    assert rep["questions"] == 2
    assert g["overall"]["facts_stated"] == round(2 / 3, 3) and g["overall"]["fully_answered"] == 0.5
    assert g["kind:error"]["fully_answered"] == 0.0 and g["kind:howto"]["fully_answered"] == 1.0
    assert g["topic:ddp"]["facts"] == 2


@pytest.mark.parametrize(
    "entry,message",
    [
        ("kind: bug", "kind must be one of"),
        ("answer_facts: []", "answer_facts must be a non-empty list"),
        ("answer_facts: [{terms: [[a]]}]", "needs a 'fact' string"),
        ("answer_facts: [{fact: f, terms: [a]}]", "terms must be a list of non-empty lists"),
        ("answer_facts: [{fact: f, terms: [[]]}]", "terms must be a list of non-empty lists"),
    ],
)
def test_malformed_answer_fields_name_the_field(tmp_path, entry, message):
    f = tmp_path / "q.yaml"
    f.write_text(f"questions:\n  - {{id: q1, question: q, relevant: [x], {entry}}}\n")
    with pytest.raises(QuestionFileError, match=message) as exc:
        load_questions(f)
    assert "q1" in str(exc.value) and "\n" not in str(exc.value)


TRACE = """Traceback (most recent call last):
  File "/home/u/train.py", line 88, in <module>
    main()
  File "/opt/conda/lib/python3.10/site-packages/torch/nn/parallel/distributed.py", line 1515, in forward
    inputs, kwargs = self._pre_forward(*inputs, **kwargs)
                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.
"""


def test_traceback_is_condensed_to_its_error_lines():
    q = condense_query(TRACE)
    assert "conda" not in q and "main()" not in q and "^^^" not in q and "Traceback" not in q
    assert q.count("Expected to have finished reduction") == 2  # the exception line counts twice


# What a 2-rank torchrun job prints when both workers raise: init_process_group's excepthook puts
# `[rankN]: ` before each line (torch/distributed/distributed_c10d.py), the agent logs in glog
# form, and torchrun's own traceback and failure table follow.
TORCHRUN = (
    "W1202 02:07:16.364000 20738 torch/distributed/run.py:874] *****************************\n"
    "W1202 02:07:16.364000 20738 torch/distributed/run.py:874] Setting OMP_NUM_THREADS "
    "environment variable for each process to be 1 in default, to avoid your system being "
    "overloaded\n"
    + "".join(f"[rank{r}]: {ln}\n" for r in (1, 0) for ln in TRACE.splitlines())
    + "E1202 02:07:24.654000 20738 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
    "(exitcode: 1) local_rank: 1 (pid: 20798) of binary: /usr/bin/python3\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/bin/torchrun", line 8, in <module>\n'
    "    sys.exit(main())\n"
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    "============================================================\n"
    "train.py FAILED\n"
    "------------------------------------------------------------\n"
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    "  time      : 2026-12-02_02:07:24\n"
    "  host      : node7\n"
    "  rank      : 1 (local_rank: 1)\n"
    "  exitcode  : 1 (pid: 20798)\n"
    "  error_file: <N/A>\n"
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
)


def test_torchrun_output_is_condensed_to_the_workers_error():
    q = condense_query(TORCHRUN)
    lines = q.splitlines()
    assert not any(ln.startswith(("[rank", "W1202", "E1202")) for ln in lines), q
    assert "conda" not in q and "OMP_NUM_THREADS" not in q and "node7" not in q
    assert "Root Cause" not in q and "FAILED" not in q and "exitcode" not in q
    # Both ranks printed it: it counts twice (once, doubled as the exception), not three times.
    assert q.count("Expected to have finished reduction") == 2
    assert lines[-1].startswith("RuntimeError: Expected to have finished reduction")
    # torchrun's exception stays as a bare hint; its qualified name would outweigh the worker's.
    assert "ChildFailedError" in lines and "elastic" not in q


def test_torchrun_report_alone_is_kept():
    # No worker exception in the paste (a rank was killed): the report is the question.
    report = TORCHRUN[TORCHRUN.index("E1202") :].replace("exitcode  : 1", "exitcode  : -9")
    q = condense_query(report)
    assert "ChildFailedError" in q.splitlines()[-1] and "exitcode  : -9" in q
    assert "node7" not in q and "To enable traceback" not in q


@pytest.mark.parametrize(
    ("line", "bare"),
    [
        ("[rank3]: RuntimeError: x", "RuntimeError: x"),
        ('[default0]:  File "a.py"', ' File "a.py"'),
        (
            "[rank0]:[W825 13:09:39.967659278 ProcessGroupNCCL.cpp:1538] Warning: WARNING: x",
            "Warning: WARNING: x",
        ),
        ("I1202 02:07:16.364000 20738 torch/distributed/run.py:874] Sending", "Sending"),
        (
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0",
            "failed (exitcode: 1) local_rank: 0",
        ),
        ("WARNING: x: y", None),
        ("[0]:", "[0]:"),
        ("RuntimeError: [/gloo/pair.cc:553] Connection closed", None),
        ("Error: x", None),
    ],
)
def test_log_prefixes_are_stripped(line, bare):
    assert _strip_log_prefix(line) == (line if bare is None else bare)


def test_prefixed_lines_outside_a_traceback_are_stripped_too():
    q = "[rank0]:[W825 13:09:39.96 ProcessGroupNCCL.cpp:1538] Warning: destroy_process_group()"
    assert condense_query(q) == "Warning: destroy_process_group()"
    assert condense_query("plain question, [rank0]: inline") == "plain question, [rank0]: inline"


def test_long_traceback_keeps_its_tail():
    long_trace = TRACE.replace("  File", "  File", 1) + "".join(
        f'  File "/x/f{i}.py", line {i}, in g\n    g()\n' for i in range(200)
    )
    long_trace = "Traceback (most recent call last):\n" + long_trace.split("\n", 1)[1]
    long_trace += "ValueError: the real error\n"
    q = condense_query(long_trace, limit=300)
    assert len(q) <= 300 and q.endswith("ValueError: the real error")


def test_plain_long_query_keeps_its_head():
    assert condense_query("word " * 1000, limit=50) == ("word " * 1000)[:50]


def test_excerpt_keeps_the_first_block_and_the_matching_one():
    text = "Signature line.\n\n" + "\n\n".join(
        f"Filler paragraph {i} " + "x" * 200 for i in range(10)
    )
    text += "\n\nThe answer: set_requires_gradient_sync(False) on all but the last micro-batch."
    out = excerpt(text, {"set_requires_gradient_sync", "micro"}, 600)
    assert out.startswith("Signature line.") and "set_requires_gradient_sync(False)" in out
    assert len(out) <= 600 and "[...]" in out


def test_excerpt_never_cuts_code():
    text = "Head.\n\n```python\n" + "x = 1\n" * 200 + "```\n\nTail with term."
    out = excerpt(text, {"term"}, 300)
    assert out.count("```") % 2 == 0 and "x = 1" not in out and "Tail with term." in out


def _hit(rank, source, objects, text, score=1.0):
    return {
        "rank": rank,
        "source": source,
        "objects": objects,
        "text": text,
        "score": score,
        "breadcrumbs": ["Page", f"Hit {rank}"],
        "url": "u",
        "torch_version": "2.13.0",
    }


@pytest.mark.parametrize("max_chars", [200, 1000, 3000, 6000])
def test_output_never_exceeds_max_chars(max_chars):
    hits = [_hit(i, "docstring", ["a.b"], ("para " * 80 + "\n\n") * 10) for i in range(1, 6)]
    out = render_markdown("para", hits, max_chars, 1)
    assert len(out) <= max_chars and out.startswith("## 1. ")


def test_every_hit_gets_a_share_of_the_budget():
    hits = [_hit(i, "docstring", ["a.b"], ("para " * 80 + "\n\n") * 10) for i in range(1, 6)]
    out = render_markdown("para", hits, 6000, 1)
    assert all(f"## {i}. " in out for i in range(1, 6)), out[:500]


def test_guide_moves_ahead_of_the_reference_entry_on_its_api():
    hits = [
        _hit(1, "docstring", ["x.api"], "sig", 10.0),
        _hit(2, "docstring", ["y"], "", 9.0),
        _hit(3, "guide", ["x.api"], "fix", 6.0),
        _hit(4, "guide", ["z"], "", 5.9),
    ]
    _guides_first(hits)
    assert [h["text"] for h in hits[:2]] == ["fix", "sig"]
    weak = [_hit(1, "docstring", ["x.api"], "sig", 10.0), _hit(2, "guide", ["x.api"], "fix", 4.0)]
    _guides_first(weak)
    assert weak[0]["text"] == "sig"  # a weak guide match does not jump the queue


class _FakeIndex:
    def __init__(self, titles):
        self.titles = titles

    def doc(self, n):
        return {"title": self.titles[n]}


def test_a_quoted_error_title_is_boosted():
    from fsdp_skill.search.engine import _quoted_titles_first

    idx = _FakeIndex(
        {
            0: "Long section sharing many words",
            1: "Expected to mark a variable ready only once",
            2: "DDP",
        }
    )
    ranked = [(0, 10.0), (2, 9.5), (1, 7.0)]
    query = (
        "RuntimeError: Expected to mark a variable ready only once. This error is caused by ... DDP"
    )
    order = [d for d, _ in _quoted_titles_first(idx, query, ranked, {})]
    assert order[0] == 1  # the quoted message wins
    assert order[1:] == [0, 2]  # a short title ("DDP") found in the query by chance gets nothing


def test_a_parameter_named_in_a_signature_is_not_an_answer():
    from fsdp_skill.eval import answer_text

    out = (
        "```python\nclass torch.distributed.fsdp.FullyShardedDataParallel(module: Module, "
        "sync_module_states: bool = False)\n```\nUse `torch.cuda.set_device(local_rank)` first."
    )
    fact = {"fact": "f", "terms": [["sync_module_states"]]}
    assert fact_covered(fact, _norm(out)) and not fact_covered(fact, _norm(answer_text(out)))
    assert "set_device(local_rank)" in answer_text(out)  # code that is not a signature stays


def _index_of(tmp_path, body, max_chars=None):
    """An index of one guide page with markdown `body`, chunked as the build does."""
    from fsdp_skill.chunking import MAX_CHARS, chunk_markdown
    from fsdp_skill.index import builder
    from fsdp_skill.index.store import Index

    meta = {"title": "P", "url": "p.md", "source": "guide", "page": "p", "torch_version": "x"}
    chunks = [c.to_dict() for c in chunk_markdown(meta, body, "p.md", max_chars or MAX_CHARS)]
    for c in chunks:
        c["flags"] = ""
    builder.build(chunks, str(tmp_path / "index.bin"), {"torch_version": "x"}, "stamp")
    return Index(str(tmp_path / "index.bin")), chunks


def _section_index(tmp_path, tail=""):
    """An index of one page whose error entry is long enough to be stored in two chunks: the
    cause in the first, the fix (naming `zap_everything`) in the second; `tail` is markdown
    placed after the entry."""
    filler = " ".join(["the widget gradient stalls while the buffer grows"] * 12)
    body = (
        "## Intro\n\nUnrelated text about meshes and ranks.\n\n"
        "## Widget stalls in backward\n\n<!-- objects: pkg.widget -->\n\n"
        "```text\nRuntimeError: widget stalls in backward\n```\n\n"
        f"**Cause.** {filler}\n\n**Cause, again.** {filler}\n\n"
        "**Fix.** Call zap_everything() before the step.\n\n" + tail
    )
    idx, chunks = _index_of(tmp_path, body, max_chars=900)
    assert sum(c["title"] == "Widget stalls in backward" for c in chunks) >= 2
    return idx


@pytest.mark.parametrize("tail", ["", "## Something else\n\nOther words about gloo groups.\n"])
def test_a_hit_from_a_section_in_several_chunks_carries_the_whole_section(tmp_path, tail):
    from fsdp_skill.search.engine import search

    idx = _section_index(tmp_path, tail)  # the entry last on the page, or followed by another
    for query in (
        "RuntimeError: widget stalls in backward, the buffer grows",  # matches the cause part
        "zap_everything",  # matches the fix part: the walk goes back to the cause
    ):
        hit = search(idx, query)[0]
        text = hit["text"]
        assert hit["title"] == "Widget stalls in backward"
        assert text.startswith("```text\nRuntimeError: widget stalls in backward\n```")
        assert text.count("RuntimeError: widget stalls in backward") == 1  # head kept once
        assert text.index("**Cause.**") < text.index("**Fix.**")  # section order
        assert "zap_everything" in text and "**Cause, again.**" in text
        assert "meshes" not in text and "gloo groups" not in text  # no neighbour's text
    # Without it the best-scoring chunk stands alone and the fix is lost: what this guards.
    part = search(
        idx, "RuntimeError: widget stalls in backward, the buffer grows", whole_sections=False
    )[0]
    assert "zap_everything" not in part["text"]
    idx.close()


def test_two_sections_of_the_same_heading_are_not_merged(tmp_path):
    from fsdp_skill.search.engine import search

    body = (
        "## Alpha\n\n### Example\n\nAlpha example: call frobnicate_alpha().\n\n"
        "## Beta\n\n### Example\n\nBeta example: call frobnicate_beta().\n\n"
        "### Example\n\nGamma example: call frobnicate_gamma().\n"
    )
    idx, _ = _index_of(tmp_path, body)
    for word, other in (("alpha", "beta"), ("beta", "gamma"), ("gamma", "beta")):
        text = search(idx, f"frobnicate_{word}", per_page_cap=5)[0]["text"]
        assert f"frobnicate_{word}" in text and f"frobnicate_{other}" not in text
    idx.close()


def test_a_bare_api_name_finds_its_reference_entry_first():
    from fsdp_skill.search.engine import _quoted_titles_first, bare_api_name

    def boosted(query):
        return _quoted_titles_first(Idx(), query, ranked, {}, bare_api_name(query))

    assert bare_api_name("init_process_group") == "init_process_group"
    assert bare_api_name("`FSDPModule.unshard()`") == "fsdpmodule.unshard"
    assert bare_api_name("DistributedDataParallel") == "distributeddataparallel"
    assert bare_api_name("barrier") == ""  # a plain word may mean anything
    assert bare_api_name("how to use init_process_group") == ""

    class Idx:
        docs = {
            0: {"title": "Timeouts: init_process_group timeout", "source": "guide"},
            1: {
                "title": "torch.distributed.checkpoint.state_dict_saver.save",
                "source": "docstring",
            },
            2: {"title": "torch.distributed.init_process_group", "source": "docstring"},
        }

        def doc(self, n):
            return self.docs[n]

    ranked = [(0, 10.0), (1, 9.0), (2, 8.0)]
    assert boosted("init_process_group")[0][0] == 2
    # The public alias of an entry stored under its defining module is found too.
    assert boosted("torch.distributed.checkpoint.save")[0][0] == 1
    assert boosted("init process group")[0][0] == 0
