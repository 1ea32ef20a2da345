"""A small MCP server for the maestro-tools tests, built on the official Python SDK (mcp==2.3.0).

Run: python3 server.py stdio | python3 server.py http PORT
"""

import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("maestro-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers. Returns their sum."""
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(f"failed on purpose: {reason}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
