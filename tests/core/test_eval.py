"""fsdp-skill eval: the relevance rule, the question file, and the quality bar on the dev set."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_skill.eval import Judge, QuestionFileError, evaluate, load_questions

REPO = Path(__file__).resolve().parents[2]
DEV = REPO / "tests" / "eval" / "questions.yaml"


def test_alias_and_defining_module_agree_look_alikes_do_not():
    j = Judge()
    assert j.relevant(
        ["torch.distributed.fsdp._fully_shard._fully_shard.fully_shard"],
        ["torch.distributed.fsdp.fully_shard"],
    )
    assert j.relevant(
        ["torch.distributed.algorithms.Join"], ["torch.distributed.algorithms.join.Join"]
    )
    assert not j.relevant(["torch.utils.checkpoint.checkpoint"], ["torch.distributed.checkpoint"])
    # Unresolvable names match only exactly.
    assert j.relevant(["pkg.not_real"], ["pkg.not_real"])
    assert not j.relevant(["pkg.not_real"], ["pkg.other"])


def test_metrics_on_a_toy_search():
    qs = [
        {"id": "a", "question": "q1", "relevant": ["x.A"], "topic": "t"},
        {"id": "b", "question": "q2", "relevant": ["x.B"], "topic": "t"},
    ]
    results = {
        "q1": [{"objects": ["x.A"], "text": "aaa", "title": "A"}],
        "q2": [
            {"objects": ["x.Z"], "text": "zzzz", "title": "Z"},
            {"objects": ["x.B"], "text": "", "title": "B"},
        ],
    }
    rep = evaluate(qs, lambda q: results[q])
    assert rep["overall"]["recall@1"] == 0.5 and rep["overall"]["recall@5"] == 1.0
    assert rep["overall"]["mrr@10"] == 0.75
    assert [r["chars_to_answer"] for r in rep["rows"]] == [0, 4] and rep["misses"] == []


@pytest.mark.parametrize(
    "content,message",
    [
        ("questions: []", "expected a top-level 'questions:' list"),
        ("questions: [{id: a, question: q}]", "lacks relevant"),
        ("{{{", "not valid YAML"),
    ],
)
def test_bad_question_files(tmp_path, content, message):
    f = tmp_path / "q.yaml"
    f.write_text(content)
    with pytest.raises(QuestionFileError, match=message):
        load_questions(f)


def test_unreadable_question_files_are_one_line_errors(tmp_path, monkeypatch):
    fifo = tmp_path / "q.yaml"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    with pytest.raises(QuestionFileError, match=r"q\.yaml is a FIFO, not a regular file"):
        load_questions(fifo)
    with pytest.raises(QuestionFileError, match="cannot read .*none.yaml: No such file"):
        load_questions(tmp_path / "none.yaml")
    (tmp_path / "bad.yaml").write_bytes(b"questions: \xff\n")
    with pytest.raises(QuestionFileError, match="is not UTF-8 text"):
        load_questions(tmp_path / "bad.yaml")
    big = tmp_path / "big.yaml"
    big.write_text("questions: [{id: a, question: q, relevant: x}]\n")
    monkeypatch.setattr("fsdp_skill.eval.MAX_FILE_BYTES", 10)
    with pytest.raises(QuestionFileError, match=r"big\.yaml is larger than 10 bytes"):
        load_questions(big)


def test_dev_set_is_well_formed():
    qs = load_questions(DEV)
    assert len(qs) >= 50
    assert len({q["id"] for q in qs}) == len(qs)
    assert len({q["source"] for q in qs}) == len(qs)
    topics = {q["topic"] for q in qs}
    assert {
        "fsdp2",
        "fsdp1",
        "checkpoint",
        "ddp",
        "join",
        "zero",
        "process_group",
        "device_mesh",
        "elastic",
        "collectives",
        "activation_checkpointing",
        "tensor_parallel",
    } <= topics
    from fsdp_skill.apinames import exists

    assert [n for q in qs for n in q["relevant"] if not exists(n)] == []


HELDOUT = REPO / "tests" / "eval" / "heldout.yaml"


@pytest.mark.parametrize("path,size", [(DEV, 120), (HELDOUT, 80)])
def test_question_sets_carry_answers(path, size):
    qs = load_questions(path)
    assert len(qs) >= size
    assert all(q.get("kind") in ("error", "howto") and q.get("answer_facts") for q in qs), [
        q["id"] for q in qs if not q.get("answer_facts")
    ]
    assert sum(q["kind"] == "error" for q in qs) * 2 >= len(qs) * (1 if path == DEV else 0.8)
    assert all(t == t.lower() for q in qs for f in q["answer_facts"] for g in f["terms"] for t in g)


def test_held_out_threads_are_not_in_the_dev_set():
    dev = {q["source"] for q in load_questions(DEV)}
    assert not [q["id"] for q in load_questions(HELDOUT) if q["source"] in dev]


def test_eval_cli_meets_the_quality_bar(built_data):
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(built_data))
    out = subprocess.run(
        [sys.executable, "-m", "fsdp_skill.cli", "eval", "--questions", str(DEV), "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    import json

    overall = json.loads(out.stdout)["overall"]
    # Regression bars under today's dev figures (R@1 0.89, R@5 0.98, MRR 0.93).
    assert (
        overall["recall@1"] >= 0.85 and overall["recall@5"] >= 0.96 and overall["mrr@10"] >= 0.90
    ), overall


def test_eval_answers_meet_the_bar(built_data):
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(built_data))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fsdp_skill.cli",
            "eval",
            "--questions",
            str(DEV),
            "--answers",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    import json

    groups = json.loads(out.stdout)["groups"]
    # Today: facts 0.89, fully answered 0.80; every output within the 6,000-character default.
    assert (
        groups["overall"]["facts_stated"] >= 0.86 and groups["overall"]["fully_answered"] >= 0.77
    ), groups["overall"]
    assert groups["overall"]["max_chars"] <= 6000


def test_eval_cli_bad_file_is_one_line(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fsdp_skill.cli",
            "eval",
            "--questions",
            str(tmp_path / "none.yaml"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1 and "cannot read" in out.stderr and "Traceback" not in out.stderr
