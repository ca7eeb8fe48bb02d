"""Retrieval quality: baselines, each improvement switched off in turn, and the final engine.

    python tests/benchmarks/bench_quality.py [--questions tests/eval/questions.yaml] [--web] [--json]

All configurations index the same chunks (the default offline set: docstring pages of the
installed torch + our guides) and answer the same questions; relevance follows fsdp_skill.eval.
`--web` also scrapes the offline copy of docs.pytorch.org in ../shared (served on 127.0.0.1)
and reports the final engine on the index that includes the scraped pages.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("FSDP_SKILL_ROOT", str(REPO))

from fsdp_skill import paths  # noqa: E402
from fsdp_skill.build import collect_chunks  # noqa: E402
from fsdp_skill.eval import Judge, evaluate, load_questions  # noqa: E402
from fsdp_skill.index import builder  # noqa: E402
from fsdp_skill.index.store import Index  # noqa: E402
from fsdp_skill.search.engine import search  # noqa: E402


def plain_tokens(text):
    return text.lower().split()


FINAL = {
    "variant": builder.DEFAULT_VARIANT,
    "weights": builder.FIELD_WEIGHTS,
    "tokenizer": None,
    "expansion": True,
    "diversity": True,
    "prose_prior": builder.PROSE_PRIOR,
}
FLAT = {"title": 1, "objects": 1, "crumbs": 1, "text": 1}
CONFIGS = {
    "final engine": {},
    "- API-aware tokenizer (lower().split())": {"tokenizer": plain_tokens},
    "- field weights (title/objects once)": {"weights": FLAT},
    "- query expansion": {"expansion": False},
    "- diversity (entry/page caps, alias collapse)": {"diversity": False},
    "- BM25+ (BM25Okapi instead)": {"variant": "okapi"},
    "- prose prior (chunks naming no API)": {"prose_prior": 1.0},
}


def plain_baseline(chunks, questions, judge):
    """rank-bm25's README recipe: BM25Okapi over text.lower().split(), get_scores, top 10."""
    import rank_bm25

    bm25 = rank_bm25.BM25Okapi([plain_tokens(c["text"]) for c in chunks])

    def run(q):
        scores = bm25.get_scores(plain_tokens(q))
        order = sorted(range(len(chunks)), key=lambda i: -scores[i])[:10]
        return [chunks[i] for i in order]

    return evaluate(questions, run, judge=judge)


def engine(chunks, questions, judge, work, **over):
    cfg = dict(FINAL, **over)
    tok = cfg["tokenizer"] or builder.tokenize
    path = work / f"idx-{abs(hash(json.dumps(over, default=str)))}.bin"
    builder.build(
        chunks,
        str(path),
        {"torch_version": "bench"},
        "",
        variant=cfg["variant"],
        weights=cfg["weights"],
        tokenizer=tok,
        prose_prior=cfg["prose_prior"],
    )
    index = Index(str(path))
    try:
        return evaluate(
            questions,
            lambda q: search(
                index,
                q,
                k=10,
                use_expansion=cfg["expansion"],
                diversity=cfg["diversity"],
                tokenizer=tok,
            ),
            judge=judge,
        )
    finally:
        index.close()


def scraped_chunks(work):
    """Scrape the offline site copy into work/ and return the chunks of the full default view."""
    import functools
    import http.server
    import threading
    from dataclasses import replace

    from fsdp_skill.build import refresh_web
    from fsdp_skill.sources.web.config import load_config

    site = REPO.parent / "shared" / "fixtures" / "pytorch-docs"
    if not (site / "docs").is_dir():
        return None

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = load_config().with_overrides(base_url=f"http://127.0.0.1:{server.server_address[1]}/")
        cfg = replace(cfg, client=replace(cfg.client, min_interval_s=0.0))
        refs = work / "refs"
        refresh_web(cfg, refs, log=lambda m: None)
    finally:
        server.shutdown()
    dirs = dict(paths.page_dirs(), web=str(refs / "web"))
    return [c for c in collect_chunks(dirs) if c["flags"] != "shadowed"]


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--questions", default=str(REPO / "tests" / "eval" / "questions.yaml"))
    ap.add_argument(
        "--web", action="store_true", help="also evaluate with the scraped offline site"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from fsdp_skill.build import ensure_index

    ensure_index(progress=lambda m: None)
    questions = load_questions(args.questions)
    chunks = [c for c in collect_chunks(paths.page_dirs()) if c["source"] != "web"]
    judge = Judge()
    work = Path(tempfile.mkdtemp(prefix="bench-quality-"))
    rows = {}
    try:
        rows["plain BM25Okapi, lower().split() (rank-bm25 README)"] = plain_baseline(
            chunks, questions, judge
        )
        rows["plain BM25Okapi on docstrings only"] = plain_baseline(
            [c for c in chunks if c["source"] == "docstring"], questions, judge
        )
        for name, over in CONFIGS.items():
            rows[name] = engine(chunks, questions, judge, work, **over)
        if args.web:
            web = scraped_chunks(work)
            if web is None:
                print(
                    "bench_quality: no offline site in ../shared; skipping --web", file=sys.stderr
                )
            else:
                rows["final engine + scraped site"] = engine(web, questions, judge, work)
                rows["  + scraped site, - prose prior"] = engine(
                    web, questions, judge, work, prose_prior=1.0
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(
            json.dumps(
                {k: {"overall": v["overall"], "topics": v["topics"]} for k, v in rows.items()},
                indent=2,
            )
        )
        return
    cols = ("recall@1", "recall@5", "recall@10", "mrr@10", "median_chars_to_answer")
    print(f"{len(questions)} questions, {len(chunks)} chunks (offline default index)\n")
    print("| configuration | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name, rep in rows.items():
        print(f"| {name} | " + " | ".join(str(rep["overall"][c]) for c in cols) + " |")
    final = rows["final engine"]
    print("\nFinal engine per topic:\n")
    print("| topic | n | " + " | ".join(cols[:4]) + " |")
    print("|---" * 6 + "|")
    for topic, m in final["topics"].items():
        print(f"| {topic} | {m['n']} | " + " | ".join(str(m[c]) for c in cols[:4]) + " |")


if __name__ == "__main__":
    main()
