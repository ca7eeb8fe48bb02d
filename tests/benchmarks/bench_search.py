"""Search speed, measured against baselines in the same run (medians; the machine is noisy).

    python tests/benchmarks/bench_search.py [--runs 30] [--json]

1. Cold CLI process: `python -c pass` (floor) vs `python scripts/search.py Q` vs
   `fsdp-skill search Q` vs the plain way (load the tokenized corpus from JSON, build
   rank-bm25's BM25Okapi, get_top_n) on the same chunks.
2. In-process query latency (p50/p95) over the development questions.
3. `fsdp-skill build --force` from the installed torch, torch import included.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QUERY = "compress DDP gradients with PowerSGD"

PLAIN = """
import json, sys
from rank_bm25 import BM25Okapi
data = json.load(open(sys.argv[1]))
bm25 = BM25Okapi(data["tokens"])
top = bm25.get_top_n(sys.argv[2].lower().split(), data["texts"], n=5)
print(top[0][:80])
"""


def timed(cmd, env, runs):
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
        )
        samples.append(time.perf_counter() - t)
    return samples


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--build-runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    sys.path.insert(0, str(REPO / "src"))
    from fsdp_skill.build import collect_chunks
    from fsdp_skill.search.engine import open_fresh, search

    work = Path(tempfile.mkdtemp(prefix="bench-search-"))
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(work / "data"))
    os.environ.update(env)
    subprocess.run(
        [sys.executable, "-m", "fsdp_skill.cli", "build"], env=env, check=True, capture_output=True
    )

    from fsdp_skill import paths

    chunks = collect_chunks(paths.page_dirs())
    corpus = work / "corpus.json"
    corpus.write_text(
        json.dumps(
            {
                "tokens": [c["text"].lower().split() for c in chunks],
                "texts": [c["text"] for c in chunks],
            }
        )
    )
    plain = work / "plain.py"
    plain.write_text(PLAIN)
    console = shutil.which("fsdp-skill") or str(Path(sys.executable).parent / "fsdp-skill")

    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "scripts/search.py": [sys.executable, str(REPO / "scripts" / "search.py"), QUERY],
        "scripts/search.py --json": [
            sys.executable,
            str(REPO / "scripts" / "search.py"),
            QUERY,
            "--json",
        ],
        "fsdp-skill search": [console, "search", QUERY],
        "plain BM25Okapi from JSON": [sys.executable, str(plain), str(corpus), QUERY],
    }
    # Interleave the cases so drift in machine load hits them all alike.
    samples = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, cmd in cases.items():
            samples[name] += timed(cmd, env, 1)
    med = {name: statistics.median(v) * 1000 for name, v in samples.items()}
    base = med["python -c pass"]

    index = open_fresh()
    import yaml

    questions = [
        q["question"]
        for q in yaml.safe_load((REPO / "tests/eval/questions.yaml").read_text())["questions"]
    ]
    lat = []
    for _ in range(5):
        for q in questions:
            t = time.perf_counter()
            search(index, q, k=5)
            lat.append((time.perf_counter() - t) * 1000)
    lat.sort()

    builds = []
    for _ in range(args.build_runs):
        fresh = dict(env, FSDP_SKILL_DATA_DIR=str(work / f"b{len(builds)}"))
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "fsdp_skill.cli", "build", "--force"],
            env=fresh,
            check=True,
            capture_output=True,
        )
        builds.append(time.perf_counter() - t)

    report = {
        "chunks": len(chunks),
        "cold_cli_ms": {k: round(v, 2) for k, v in med.items()},
        "ratio_vs_python_pass": {k: round(v / base, 2) for k, v in med.items()},
        "speedup_vs_plain": {
            k: round(med["plain BM25Okapi from JSON"] / med[k], 1)
            for k in ("scripts/search.py", "scripts/search.py --json", "fsdp-skill search")
        },
        "in_process_query_ms": {
            "p50": round(lat[len(lat) // 2], 3),
            "p95": round(lat[int(len(lat) * 0.95)], 3),
            "queries": len(lat),
        },
        "build_s": {
            "median": round(statistics.median(builds), 2),
            "runs": [round(b, 2) for b in builds],
        },
    }
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"chunks indexed: {report['chunks']}")
    print(f"{'cold CLI process (median of ' + str(args.runs) + ')':<44}{'ms':>9}{'x pass':>9}")
    for k, v in report["cold_cli_ms"].items():
        print(f"  {k:<42}{v:>9.2f}{report['ratio_vs_python_pass'][k]:>9.2f}")
    for k, v in report["speedup_vs_plain"].items():
        print(f"  speed-up of {k} over the plain way: {v}x")
    q = report["in_process_query_ms"]
    print(f"in-process query: p50 {q['p50']} ms, p95 {q['p95']} ms over {q['queries']} queries")
    print(
        f"fsdp-skill build --force: median {report['build_s']['median']} s (runs {report['build_s']['runs']})"
    )


if __name__ == "__main__":
    main()
