"""Answer coverage (eval --answers), traceback queries and the budgeted output."""

import pytest

from fsdp_skill.eval import QuestionFileError, _norm, evaluate_answers, fact_covered, load_questions
from fsdp_skill.search.engine import _guides_first, condense_query
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
