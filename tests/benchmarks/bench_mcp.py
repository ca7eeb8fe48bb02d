"""MCP round-trip time of one search: `fsdp-skill mcp` over stdio, driven by the MCP SDK's client.

    python tests/benchmarks/bench_mcp.py [--calls 50] [--json]

One server process, one session: initialize (timed), one warm-up call (the index opens, or is
built if missing), then `--calls` search_docs calls over the development questions, each timed
from the client's send to its parsed result. Reports the median (the figure to quote), p90, min
and max, beside the in-process search time of the same queries, so the protocol's share shows.
Needs the extra: pip install -e ".[mcp]".
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))


def questions(n):
    import yaml

    data = yaml.safe_load((REPO / "tests" / "eval" / "questions.yaml").read_text(encoding="utf-8"))
    items = data["questions"] if isinstance(data, dict) else data
    qs = [q["question"] if isinstance(q, dict) else str(q) for q in items]
    return [qs[i % len(qs)] for i in range(n)]


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        import anyio
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters
    except ImportError:
        sys.exit("bench_mcp: needs the MCP SDK: pip install -e '.[mcp]'")

    qs = questions(args.calls)
    env = {k: v for k, v in os.environ.items() if k.startswith(("FSDP_SKILL_", "XDG_", "HOME"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO / "src"))
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "fsdp_skill.cli", "mcp"], env=env, cwd=str(REPO)
    )

    async def session():
        t0 = time.perf_counter()
        async with Client(params, mode="legacy", read_timeout_seconds=300) as client:
            started = time.perf_counter() - t0
            t = time.perf_counter()
            warm = await client.call_tool("search_docs", {"query": "fully_shard"})
            first = time.perf_counter() - t
            assert not warm.is_error, warm.content[0].text
            samples = []
            for q in qs:
                t = time.perf_counter()
                r = await client.call_tool("search_docs", {"query": q})
                samples.append(time.perf_counter() - t)
                assert not r.is_error and r.structured_content["results"], q
            return started, first, samples, warm.structured_content["torch_version"]

    started, first, samples, version = anyio.run(session)

    # The same queries in-process (index open, no protocol), for the protocol's share.
    from fsdp_skill.mcp_server import Docs

    docs = Docs(str(REPO))
    local = []
    try:
        docs.search("fully_shard")
        for q in qs:
            t = time.perf_counter()
            docs.search(q)
            local.append(time.perf_counter() - t)
    finally:
        docs.close()

    ms = sorted(s * 1000 for s in samples)
    report = {
        "calls": len(ms),
        "torch_version": version,
        "round_trip_ms": {
            "median": round(statistics.median(ms), 2),
            "p90": round(ms[int(len(ms) * 0.9) - 1], 2),
            "min": round(ms[0], 2),
            "max": round(ms[-1], 2),
        },
        "in_process_ms_median": round(statistics.median(s * 1000 for s in local), 2),
        "server_start_and_initialize_ms": round(started * 1000, 1),
        "first_call_ms": round(first * 1000, 1),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    rt = report["round_trip_ms"]
    print(
        f"MCP search_docs round trip over stdio, {report['calls']} calls in one session (torch {version}):"
    )
    print(f"  median {rt['median']} ms, p90 {rt['p90']} ms, min {rt['min']} ms, max {rt['max']} ms")
    print(
        f"  same queries in-process (search + markdown): median {report['in_process_ms_median']} ms"
    )
    print(
        f"  server start + initialize {report['server_start_and_initialize_ms']} ms, "
        f"first call (index open) {report['first_call_ms']} ms"
    )


if __name__ == "__main__":
    main()
