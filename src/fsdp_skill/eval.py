"""`fsdp-skill eval`: search quality on a labelled question file.

Relevance rule: a result is relevant when one of its `objects` denotes the same Python object
as one of the question's labelled names. Both names are resolved in the installed torch with
importlib + getattr (apinames.resolve), so an alias and its defining module agree
(`torch.distributed.fsdp.fully_shard` is `torch.distributed.fsdp._fully_shard._fully_shard.fully_shard`)
while look-alikes do not (`torch.utils.checkpoint.checkpoint` is not `torch.distributed.checkpoint`).
A name that does not resolve matches only the exact same full name.

Metrics per question, averaged per topic and overall:
- recall@k: 1 when a relevant result is among the first k, else 0 (the question is answered);
- MRR@10: 1/rank of the first relevant result in the top 10, 0 if none;
- chars to answer: characters of result text an agent reads before the first relevant hit
  (all 10 results' text when there is none).

Answer coverage (`--answers`): each question lists `answer_facts`, the facts a correct answer must
state, each with a rule `terms: [[a, b], [c]]`. A fact is covered by the default output (exactly
what `scripts/search.py QUESTION` prints) when every group has at least one alternative in it
(case-insensitive, whitespace-insensitive substring). A question is answered when all its facts are.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import defaultdict
from collections.abc import Callable

import yaml

from fsdp_skill import files
from fsdp_skill.argparsing import OneLineParser, positive_int
from fsdp_skill.search.cli import SOURCES, default_output

K_VALUES = (1, 5, 10)


class QuestionFileError(ValueError):
    pass


MAX_FILE_BYTES = 8 * 1024 * 1024

Question = dict[str, object]
Row = dict[str, object]


def load_questions(path: str | os.PathLike[str]) -> list[Question]:
    try:
        # A FIFO, a device or an oversized file is refused before it is read.
        data = yaml.safe_load(files.read_capped(path, MAX_FILE_BYTES).decode("utf-8"))
    except OSError as exc:
        if exc.errno is None:  # read_capped's refusal: "is a FIFO, not a regular file", ...
            raise QuestionFileError(f"{path} {exc}") from None
        raise QuestionFileError(f"cannot read {path}: {exc.strerror}") from None
    except RecursionError:
        raise QuestionFileError(f"{path} nests too deeply") from None
    except UnicodeDecodeError:
        raise QuestionFileError(f"{path} is not UTF-8 text") from None
    except yaml.YAMLError:
        raise QuestionFileError(f"{path} is not valid YAML") from None
    qs = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(qs, list) or not qs:
        raise QuestionFileError(f"{path}: expected a top-level 'questions:' list")
    for n, q in enumerate(qs):
        missing = [
            f for f in ("id", "question", "relevant") if not (isinstance(q, dict) and q.get(f))
        ]
        if missing:
            raise QuestionFileError(f"{path}: question {n + 1} lacks {', '.join(missing)}")
        if isinstance(q["relevant"], str):
            q["relevant"] = [q["relevant"]]
        q.setdefault("topic", "other")
        where = f"{path}: question {n + 1}"
        for name in ("id", "question", "topic"):
            if not isinstance(q[name], str):
                raise QuestionFileError(f"{where}: {name} must be a string")
        if not (
            isinstance(q["relevant"], list)
            and all(isinstance(r, str) and r.strip() for r in q["relevant"])
        ):
            raise QuestionFileError(f"{where}: relevant must be a list of API names (strings)")
        _check_answer_fields(path, q)
    return qs


KINDS = ("error", "howto")


def _check_answer_fields(path: str | os.PathLike[str], q: Question) -> None:
    """One-line errors naming the question and field for a malformed kind/answer_facts."""
    where = f"{path}: question {q['id']!r}"
    if "kind" in q and q["kind"] not in KINDS:
        raise QuestionFileError(f"{where}: kind must be one of {', '.join(KINDS)}")
    facts = q.get("answer_facts")
    if facts is None:
        return
    if not isinstance(facts, list) or not facts:
        raise QuestionFileError(f"{where}: answer_facts must be a non-empty list")
    for n, f in enumerate(facts, start=1):
        terms = f.get("terms") if isinstance(f, dict) else None
        if not (isinstance(f, dict) and isinstance(f.get("fact"), str) and f["fact"].strip()):
            raise QuestionFileError(f"{where}: answer_facts[{n}] needs a 'fact' string")
        if not (
            isinstance(terms, list)
            and terms
            and all(
                isinstance(g, list) and g and all(isinstance(t, str) and t.strip() for t in g)
                for g in terms
            )
        ):
            raise QuestionFileError(
                f"{where}: answer_facts[{n}].terms must be a list of non-empty lists of strings"
            )


_MARKUP = str.maketrans("", "", "`*")


def _norm(text: str) -> str:
    """Lower-cased, whitespace-collapsed, without Markdown code and emphasis marks: a rule's
    "before fully_shard" must match an output's "*before* `fully_shard`"."""
    return " ".join(text.lower().translate(_MARKUP).split())


def answer_text(output: str) -> str:
    """The output without typed API signature lines: a parameter named in a signature
    (`sync_module_states: bool = False`) tells the reader nothing about what it does."""
    return "\n".join(line for line in output.splitlines() if not _is_signature(line))


def _is_signature(line: str) -> bool:
    if not line.startswith(("class torch.", "torch.")) or "(" not in line:
        return False
    params = line.split("(", 1)[1]
    return ": " in params or " -> " in line


def fact_covered(fact: dict[str, object], output: str) -> bool:
    """True when every term group of `fact` has an alternative in `output` (already _norm-ed)."""
    return all(any(_norm(t) in output for t in group) for group in fact["terms"])


def evaluate_answers(
    questions: list[Question], output_fn: Callable[[str], str]
) -> dict[str, object]:
    """Answer coverage of `output_fn(question) -> printed text` over the questions with facts."""
    rows = []
    for q in questions:
        if not q.get("answer_facts"):
            continue
        out = output_fn(q["question"])
        norm = _norm(answer_text(out))
        covered = [fact_covered(f, norm) for f in q["answer_facts"]]
        rows.append(
            {
                "id": q["id"],
                "topic": q["topic"],
                "kind": q.get("kind", "howto"),
                "question": q["question"],
                "chars": len(out),
                "output": out,
                "facts": [
                    {"fact": f["fact"], "covered": c} for f, c in zip(q["answer_facts"], covered)
                ],
            }
        )
    groups = {"overall": rows}
    for key in ("kind", "topic"):
        for row in rows:
            groups.setdefault(f"{key}:{row[key]}", []).append(row)
    return {
        "questions": len(rows),
        "groups": {name: _answer_metrics(rs) for name, rs in groups.items()},
        "rows": rows,
    }


def _answer_metrics(rows: list[Row]) -> dict[str, object]:
    facts = [f["covered"] for r in rows for f in r["facts"]]
    return {
        "n": len(rows),
        "facts": len(facts),
        "facts_stated": round(sum(facts) / (len(facts) or 1), 3),
        "fully_answered": round(
            sum(all(f["covered"] for f in r["facts"]) for r in rows) / (len(rows) or 1), 3
        ),
        "max_chars": max((r["chars"] for r in rows), default=0),
    }


def format_answers(report: dict[str, object], show_output: bool = False) -> str:
    cols = ["n", "facts", "facts_stated", "fully_answered", "max_chars"]
    lines = ["| group | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, m in report["groups"].items():
        lines.append(f"| {name} | " + " | ".join(str(m[c]) for c in cols) + " |")
    lines.append("")
    for r in report["rows"]:
        marks = "".join("+" if f["covered"] else "-" for f in r["facts"])
        lines.append(f"[{marks}] {r['id']} ({r['kind']}, {r['topic']}, {r['chars']} chars)")
        for f in r["facts"]:
            if not f["covered"]:
                lines.append(f"      missing: {f['fact']}")
        if show_output:
            lines += ["", r["output"].rstrip(), "", "-" * 72]
    return "\n".join(lines) + "\n"


class Judge:
    """Decides relevance by object identity, caching resolutions."""

    def __init__(self) -> None:
        from fsdp_skill import apinames

        self._api = apinames
        self._cache = {}

    def _resolve(self, name: str) -> object:
        if name not in self._cache:
            self._cache[name] = self._api.resolve(name)
        return self._cache[name]

    def relevant(self, objects: list[str], labels: list[str]) -> bool:
        with warnings.catch_warnings():
            # Resolving deprecated aliases (torch.distributed.reduce_op) warns; irrelevant here.
            warnings.simplefilter("ignore")
            return self._relevant(objects, labels)

    def _relevant(self, objects: list[str], labels: list[str]) -> bool:
        for o in objects:
            for label in labels:
                if o == label:
                    return True
                a, b = self._resolve(o), self._resolve(label)
                if a is not None and b is not None and self._api.same_object(a, b):
                    return True
        return False


def evaluate(
    questions: list[Question],
    search_fn: Callable[[str], list[dict[str, object]]],
    k: int = 10,
    judge: Judge | None = None,
) -> dict[str, object]:
    """Run `search_fn(question) -> [result dict]` over the questions; returns the report dict."""
    judge = judge or Judge()
    rows = []
    for q in questions:
        results = search_fn(q["question"])[:k]
        first, chars = None, 0
        for rank, r in enumerate(results, start=1):
            if judge.relevant(r["objects"], q["relevant"]):
                first = rank
                break
            chars += len(r["text"])
        rows.append(
            {
                "id": q["id"],
                "topic": q["topic"],
                "question": q["question"],
                "relevant": q["relevant"],
                "first_relevant_rank": first,
                "chars_to_answer": chars,
                "top": [r["objects"][:1] and r["objects"][0] or r["title"] for r in results[:3]],
            }
        )
    by_topic = defaultdict(list)
    for row in rows:
        by_topic[row["topic"]].append(row)
    return {
        "k": k,
        "questions": len(rows),
        "overall": _metrics(rows),
        "topics": {t: _metrics(rs) for t, rs in sorted(by_topic.items())},
        "misses": [
            r for r in rows if r["first_relevant_rank"] is None or r["first_relevant_rank"] > 5
        ],
        "rows": rows,
    }


def _metrics(rows: list[Row]) -> dict[str, object]:
    n = len(rows) or 1
    out = {"n": len(rows)}
    for k in K_VALUES:
        out[f"recall@{k}"] = round(
            sum(1 for r in rows if r["first_relevant_rank"] and r["first_relevant_rank"] <= k) / n,
            3,
        )
    out["mrr@10"] = round(
        sum(
            1 / r["first_relevant_rank"]
            for r in rows
            if r["first_relevant_rank"] and r["first_relevant_rank"] <= 10
        )
        / n,
        3,
    )
    chars = sorted(r["chars_to_answer"] for r in rows)
    out["median_chars_to_answer"] = chars[len(chars) // 2] if chars else 0
    return out


def format_report(report: dict[str, object]) -> str:
    cols = ["n", "recall@1", "recall@5", "recall@10", "mrr@10", "median_chars_to_answer"]
    lines = ["| topic | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, m in list(report["topics"].items()) + [("**overall**", report["overall"])]:
        lines.append(f"| {name} | " + " | ".join(str(m[c]) for c in cols) + " |")
    if report["misses"]:
        lines += ["", "Misses (no relevant hit in the top 5):"]
        for r in report["misses"]:
            rank = r["first_relevant_rank"] or "-"
            lines.append(
                f"- [{r['topic']}] {r['id']} (first relevant rank {rank}); wanted {', '.join(r['relevant'])}; "
                f"got {', '.join(r['top'])}"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(
        prog="fsdp-skill eval", description="Measure search quality on labelled questions."
    )
    p.add_argument(
        "--questions",
        required=True,
        help="YAML file: questions: [{id, question, relevant, topic, source}]",
    )
    p.add_argument(
        "--k", type=positive_int, default=10, help="results considered per question (default 10)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--source", choices=SOURCES, help="search one source only")
    p.add_argument(
        "--answers",
        action="store_true",
        help="measure answer coverage instead: the facts of each question's answer_facts "
        "stated in the default search output",
    )
    p.add_argument(
        "--show-output", action="store_true", help="with --answers: print each output too"
    )
    args = p.parse_args(argv)
    try:
        questions = load_questions(args.questions)
    except QuestionFileError as exc:
        print(f"fsdp-skill eval: error: {exc}", file=sys.stderr)
        return 1
    from fsdp_skill.search.engine import SearchError, open_fresh, search

    try:
        index = open_fresh()
    except SearchError as exc:
        print(f"fsdp-skill eval: error: {exc}", file=sys.stderr)
        return 1
    try:
        if args.answers:
            report = evaluate_answers(
                questions, lambda q: default_output(index, q, source=args.source)
            )
        else:
            report = evaluate(
                questions, lambda q: search(index, q, k=args.k, source=args.source), k=args.k
            )
    finally:
        index.close()
    if args.answers and not args.json:
        print(format_answers(report, args.show_output), end="")
        return 0
    if args.json:
        import json

        print(json.dumps(report, indent=2))
    else:
        print(format_report(report), end="")
    return 0
