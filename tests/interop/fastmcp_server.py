#!/usr/bin/env python3
"""A small server on fastmcp 4.x (installed by .ci/install-deps), for the interop tests.

Tools:
    echo(message)       returns "Echo: <message>"
    ask_name()          elicits a name from the client (in the 2026-07-28 era fastmcp does this
                        with an `input_required` round; in the handshake era with a request) and
                        returns "Hello, <name>"
    count(steps)        reports `steps` progress notifications, returns "counted <steps>"
Run with `python fastmcp_server.py` (stdio).
"""

from fastmcp import Context, FastMCP

mcp = FastMCP("interop-fastmcp")


@mcp.tool
def echo(message: str) -> str:
    """Echoes the message back."""
    return f"Echo: {message}"


@mcp.tool
async def ask_name(ctx: Context) -> str:
    """Asks the client for a name (elicitation)."""
    answer = await ctx.elicit("What is your name?", response_type=str)
    if answer.action != "accept":
        return f"no name ({answer.action})"
    return f"Hello, {answer.data}"


@mcp.tool
async def count(steps: int, ctx: Context) -> str:
    """Reports `steps` progress notifications."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps)
    return f"counted {steps}"


if __name__ == "__main__":
    import sys

    # `--http PORT`: Streamable HTTP on 127.0.0.1:PORT at /mcp (the url-server tests, issue 29);
    # without it, stdio.
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False)
    else:
        mcp.run(show_banner=False)
