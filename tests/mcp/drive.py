"""Drives tabby's MCP server with the official MCP Python SDK (PyPI `mcp`, pinned in
requirements.txt), for the end-to-end tests in tests/e2e/mcp.rs.

Usage: python drive.py http URL TOKEN CALLS.json
       python drive.py stdio TABBY_BINARY URL TOKEN CALLS.json

CALLS.json is a list of {"name": tool, "arguments": {...}}. Prints one JSON object: the
server's name, the tools it lists (name, description, input schema, read-only hint), and per
call either {"is_error", "text", "structured"} or {"error": {"code", "message"}} for a
JSON-RPC error. An empty TOKEN sends no Authorization header.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


async def exercise(session, calls):
    init = await session.initialize()
    listed = await session.list_tools()
    out = {
        "server": init.server_info.name,
        "protocol": init.protocol_version,
        "tools": [
            {
                "name": t.name,
                "description": t.description,
                "schema": t.input_schema,
                "read_only": bool(t.annotations and t.annotations.read_only_hint),
            }
            for t in listed.tools
        ],
        "results": [],
    }
    for call in calls:
        print(f"calling {call['name']}", file=sys.stderr, flush=True)
        try:
            result = await session.call_tool(call["name"], call.get("arguments", {}))
            out["results"].append({
                "is_error": bool(result.is_error),
                "text": "\n".join(c.text for c in result.content if getattr(c, "text", None)),
                "structured": result.structured_content,
            })
        except MCPError as e:
            out["results"].append({"error": {"code": e.code, "message": e.message}})
    return out


async def main():
    mode = sys.argv[1]
    if mode == "http":
        url, token, calls_file = sys.argv[2:5]
        calls = json.load(open(calls_file))
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=90) as http:
            async with streamable_http_client(url, http_client=http) as (read, write, *_):
                async with ClientSession(read, write) as session:
                    out = await exercise(session, calls)
    else:
        binary, url, token, calls_file = sys.argv[2:6]
        calls = json.load(open(calls_file))
        params = StdioServerParameters(
            command=binary,
            args=["mcp", "--endpoint", url],
            env={"TABBY_TOKEN": token} if token else None,
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                out = await exercise(session, calls)
    print(json.dumps(out))


asyncio.run(main())
