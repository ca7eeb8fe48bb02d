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
"""

import sys
import warnings
from collections import defaultdict
from pathlib import Path

import yaml

from .argparsing import OneLineParser

K_VALUES = (1, 5, 10)


class QuestionFileError(ValueError):
    pass


def load_questions(path):
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise QuestionFileError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise QuestionFileError(f"{path} is not UTF-8 text") from None
    except yaml.YAMLError:
        raise QuestionFileError(f"{path} is not valid YAML") from None
    qs = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(qs, list) or not qs:
        raise QuestionFileError(f"{path}: expected a top-level 'questions:' list")
    for n, q in enumerate(qs):
        missing = [f for f in ("id", "question", "relevant") if not (isinstance(q, dict) and q.get(f))]
        if missing:
            raise QuestionFileError(f"{path}: question {n + 1} lacks {', '.join(missing)}")
        if isinstance(q["relevant"], str):
            q["relevant"] = [q["relevant"]]
        q.setdefault("topic", "other")
    return qs


class Judge:
    """Decides relevance by object identity, caching resolutions."""

    def __init__(self):
        from . import apinames

        self._api = apinames
        self._cache = {}

    def _resolve(self, name):
        if name not in self._cache:
            self._cache[name] = self._api.resolve(name)
        return self._cache[name]

    def relevant(self, objects, labels):
        with warnings.catch_warnings():
            # Resolving deprecated aliases (torch.distributed.reduce_op) warns; irrelevant here.
            warnings.simplefilter("ignore")
            return self._relevant(objects, labels)

    def _relevant(self, objects, labels):
        for o in objects:
            for label in labels:
                if o == label:
                    return True
                a, b = self._resolve(o), self._resolve(label)
                if a is not None and b is not None and self._api.same_object(a, b):
                    return True
        return False


def evaluate(questions, search_fn, k=10, judge=None):
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
        rows.append({
            "id": q["id"], "topic": q["topic"], "question": q["question"], "relevant": q["relevant"],
            "first_relevant_rank": first, "chars_to_answer": chars,
            "top": [r["objects"][:1] and r["objects"][0] or r["title"] for r in results[:3]],
        })
    by_topic = defaultdict(list)
    for row in rows:
        by_topic[row["topic"]].append(row)
    return {
        "k": k,
        "questions": len(rows),
        "overall": _metrics(rows),
        "topics": {t: _metrics(rs) for t, rs in sorted(by_topic.items())},
        "misses": [r for r in rows if r["first_relevant_rank"] is None or r["first_relevant_rank"] > 5],
        "rows": rows,
    }


def _metrics(rows):
    n = len(rows) or 1
    out = {"n": len(rows)}
    for k in K_VALUES:
        out[f"recall@{k}"] = round(sum(1 for r in rows if r["first_relevant_rank"] and r["first_relevant_rank"] <= k) / n, 3)
    out["mrr@10"] = round(sum(1 / r["first_relevant_rank"] for r in rows
                              if r["first_relevant_rank"] and r["first_relevant_rank"] <= 10) / n, 3)
    chars = sorted(r["chars_to_answer"] for r in rows)
    out["median_chars_to_answer"] = chars[len(chars) // 2] if chars else 0
    return out


def format_report(report):
    cols = ["n", "recall@1", "recall@5", "recall@10", "mrr@10", "median_chars_to_answer"]
    lines = ["| topic | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, m in list(report["topics"].items()) + [("**overall**", report["overall"])]:
        lines.append(f"| {name} | " + " | ".join(str(m[c]) for c in cols) + " |")
    if report["misses"]:
        lines += ["", "Misses (no relevant hit in the top 5):"]
        for r in report["misses"]:
            rank = r["first_relevant_rank"] or "-"
            lines.append(f"- [{r['topic']}] {r['id']} (first relevant rank {rank}); wanted {', '.join(r['relevant'])}; "
                         f"got {', '.join(r['top'])}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = OneLineParser(prog="fsdp-skill eval", description="Measure search quality on labelled questions.")
    p.add_argument("--questions", required=True, help="YAML file: questions: [{id, question, relevant, topic, source}]")
    p.add_argument("--k", type=int, default=10, help="results considered per question (default 10)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--source", choices=("web", "docstring", "guide"), help="search one source only")
    args = p.parse_args(argv)
    if args.k < 1:
        print("fsdp-skill eval: error: --k must be at least 1", file=sys.stderr)
        return 2
    try:
        questions = load_questions(args.questions)
    except QuestionFileError as exc:
        print(f"fsdp-skill eval: error: {exc}", file=sys.stderr)
        return 1
    from .search import SearchError, open_fresh, search

    try:
        index = open_fresh()
    except SearchError as exc:
        print(f"fsdp-skill eval: error: {exc}", file=sys.stderr)
        return 1
    try:
        report = evaluate(questions, lambda q: search(index, q, k=args.k, source=args.source), k=args.k)
    finally:
        index.close()
    if args.json:
        import json

        print(json.dumps(report, indent=2))
    else:
        print(format_report(report), end="")
    return 0
