"""`fsdp-skill mcp` driven as an agent's client drives it: the real server over stdio, with the
MCP SDK's own client (initialize, list tools, call each tool, bad calls), plus the raw wire."""

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP SDK is an optional extra: pip install -e '.[mcp]'")
anyio = pytest.importorskip("anyio")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"search_docs", "read_reference", "list_examples", "get_example"}
QUERY = "fully_shard mixed precision"


def server_params(data_dir, **env):
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "fsdp_skill.cli", "mcp"],
        cwd=str(REPO),
        env={
            "FSDP_SKILL_ROOT": str(REPO),
            "FSDP_SKILL_DATA_DIR": str(data_dir),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO / "src"),
            **env,
        },
    )


def session(data_dir, body, mode="legacy"):
    """Run `await body(client)` against a fresh server process; returns what body returns."""

    async def main():
        async with Client(server_params(data_dir), mode=mode, read_timeout_seconds=120) as client:
            return await body(client)

    return anyio.run(main)


def cli_json(args, data_dir):
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(data_dir))
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "search.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def text_of(result):
    return "".join(block.text for block in result.content if block.type == "text")


def test_full_session_initialize_list_call_each_tool_and_bad_calls(built_data):
    async def body(client):
        got = {"info": client.server_info, "instructions": client.instructions}
        got["tools"] = (await client.list_tools()).tools
        got["search"] = await client.call_tool("search_docs", {"query": QUERY, "k": 3})
        got["search_guides"] = await client.call_tool(
            "search_docs", {"query": QUERY, "k": 2, "source": "guide"}
        )
        hit = got["search"].structured_content["results"][0]
        got["read_id"] = await client.call_tool("read_reference", {"path_or_id": hit["id"]})
        got["read_api"] = await client.call_tool(
            "read_reference", {"path_or_id": "torch.distributed.fsdp.fully_shard"}
        )
        got["read_page"] = await client.call_tool(
            "read_reference", {"path_or_id": "references/guides/checkpointing.md"}
        )
        got["examples"] = await client.call_tool("list_examples", {})
        got["example"] = await client.call_tool("get_example", {"name": "fsdp2_train"})
        got["bad"] = [
            await client.call_tool(name, args)
            for name, args in [
                ("search_docs", {"query": "   "}),
                ("search_docs", {"query": "x", "k": 0}),
                ("search_docs", {"query": "x", "k": "many"}),
                ("search_docs", {"query": "x", "source": "blog"}),
                ("search_docs", {}),
                ("read_reference", {"path_or_id": "references/guides/nope.md#nothing"}),
                ("get_example", {"name": "../../etc/passwd"}),
                ("get_example", {"name": "search"}),
            ]
        ]
        # The server survived every bad call.
        got["after"] = await client.call_tool("search_docs", {"query": QUERY, "k": 3})
        return got

    got = session(built_data, body)

    assert got["info"].name == "pytorch-fsdp"
    assert "search_docs" in got["instructions"] and "read_reference" in got["instructions"]
    tools = {t.name: t for t in got["tools"]}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert len(t.description) > 150, (
            t.name
        )  # written for an agent: when to call it, what it returns
        assert t.annotations.read_only_hint is True
    schema = tools["search_docs"].input_schema
    assert schema["required"] == ["query"] and set(schema["properties"]) == {
        "query",
        "k",
        "source",
        "page",
    }

    # search_docs: the CLI's ranked hits, its markdown, its --json object.
    search = got["search"]
    assert not search.is_error
    cli = json.loads(cli_json([QUERY, "--k", "3", "--json"], built_data))
    assert search.structured_content == cli
    assert text_of(search) == cli_json([QUERY, "--k", "3"], built_data)
    for r in search.structured_content["results"]:
        assert r["url"].startswith(("https://docs.pytorch.org/docs/2.", "references/guides/"))
    assert search.structured_content["torch_version"].startswith("2.")
    assert all(r["source"] == "guide" for r in got["search_guides"].structured_content["results"])
    assert got["after"].structured_content == cli

    # read_reference: the whole section around a hit, an API entry by name, a page with its outline.
    read = got["read_id"]
    assert not read.is_error and read.structured_content["kind"] == "section"
    hit = search.structured_content["results"][0]
    assert hit["text"][:200] in read.structured_content["text"]
    assert (
        read.structured_content["url"] == hit["url"]
        and read.structured_content["path"] == hit["path"]
    )
    api = got["read_api"].structured_content
    assert (
        api["source"] in ("docstring", "web")
        and "torch.distributed.fsdp.fully_shard" in api["objects"]
    )
    assert "Source: https://docs.pytorch.org/docs/2." in text_of(got["read_api"])
    page = got["read_page"].structured_content
    assert page["kind"] == "page" and len(page["sections"]) > 3
    assert all(s["id"].startswith("guide:checkpointing#") for s in page["sections"])

    # list_examples / get_example: the scripts with their torchrun commands.
    examples = {e["name"]: e for e in got["examples"].structured_content["examples"]}
    assert {"fsdp2_train", "ddp_train", "dcp_checkpoint", "join_uneven"} <= set(examples)
    assert "search" not in examples and not any(n.startswith("_") for n in examples)
    assert examples["fsdp2_train"]["torchrun"].startswith("torchrun --nproc-per-node ")
    example = got["example"].structured_content
    assert example["text"] == (REPO / "scripts" / "fsdp2_train.py").read_text(encoding="utf-8")
    assert example["requires"] == ["scripts/_dist_common.py"]
    assert example["torchrun"] in text_of(got["example"])

    # Bad arguments: MCP error results, one line each, naming the problem.
    needles = [
        "query is empty",
        "k: Input should be greater than or equal to 1",
        "k: Input should be a valid integer",
        "source: Input should be",
        "query: Field required",
        "no reference section",
        "no example",
        "no example 'search'",
    ]
    for result, needle in zip(got["bad"], needles):
        assert result.is_error, needle
        text = text_of(result)
        assert needle in text and "\n" not in text and "Traceback" not in text, text


def test_newer_protocol_negotiation_works_too(built_data):
    async def body(client):
        return await client.call_tool(
            "search_docs", {"query": "DistributedSampler set_epoch", "k": 2}
        )

    result = session(built_data, body, mode="auto")
    assert not result.is_error and len(result.structured_content["results"]) == 2


def _frames(lines):
    return [json.loads(line) for line in lines if line.strip()]


def test_stdout_carries_only_protocol_messages_even_while_building(built_data, tmp_path):
    """A raw client over pipes: the first search builds the index (progress on stderr), and every
    line the server writes to stdout is a JSON-RPC message."""
    data = tmp_path / "data"
    shutil.copytree(built_data, data)
    shutil.rmtree(data / "index")  # the API pages stay: rebuilding the index takes a second or two
    env = dict(
        os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(data), OMP_NUM_THREADS="1"
    )
    msgs = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "search_docs", "arguments": {"query": QUERY}},
        },
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "get_example", "arguments": {"name": "nope"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "no_such_tool", "arguments": {}},
        },
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "fsdp_skill.cli", "mcp"],
        env=env,
        cwd=REPO,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines, wanted = [], {1, 2, 3, 4, 5}

    def read_until_answered():
        for line in proc.stdout:
            lines.append(line)
            if line.strip().startswith("{") and json.loads(line).get("id") in wanted:
                wanted.discard(json.loads(line)["id"])
                if not wanted:
                    return

    reader = threading.Thread(target=read_until_answered, daemon=True)
    reader.start()
    for m in msgs:
        proc.stdin.write(json.dumps(m) + "\n")
        proc.stdin.flush()
    reader.join(timeout=240)
    rest, stderr = proc.communicate(timeout=60)  # closes stdin: EOF ends the server
    stdout = "".join(lines) + rest
    frames = _frames(stdout.splitlines())
    assert all(f.get("jsonrpc") == "2.0" for f in frames), stdout[:2000]
    by_id = {f["id"]: f for f in frames if "id" in f}
    assert set(by_id) == {1, 2, 3, 4, 5}, (stdout[-2000:], stderr[-2000:])
    assert (
        by_id[3]["result"]["isError"] is False
        and by_id[3]["result"]["structuredContent"]["results"]
    )
    assert by_id[4]["result"]["isError"] is True
    assert "error" in by_id[5] or by_id[5]["result"]["isError"] is True
    assert "building the search index" in stderr  # the build spoke, on stderr
    assert "Traceback" not in stderr
    assert proc.returncode == 0


def test_bad_command_line_and_missing_sdk_are_one_line(monkeypatch, capsys):
    from fsdp_skill import mcp_server

    assert mcp_server.main(["--port", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fsdp-skill mcp: error: unexpected argument")
    assert mcp_server.main(["--help"]) == 0 and "search_docs" in capsys.readouterr().out
    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp -> ImportError
    assert mcp_server.main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-m pip install 'mcp>=2,<3'" in err[0], err


def test_index_is_opened_once_per_process(built_data, monkeypatch):
    from fsdp_skill import mcp_server
    from fsdp_skill.search import engine as search

    monkeypatch.setenv("FSDP_SKILL_DATA_DIR", str(built_data))
    opened = []
    real = search.open_fresh
    monkeypatch.setattr(
        search, "open_fresh", lambda root=None, **kw: opened.append(root) or real(root, **kw)
    )
    docs = mcp_server.Docs(str(REPO))
    try:
        for q in ("fully_shard", "DistributedSampler", "NCCL timeout"):
            assert docs.search(q, 2)["structured"]["results"]
        docs.read("torch.distributed.fsdp.fully_shard")
    finally:
        docs.close()
    assert opened == [str(REPO)]
