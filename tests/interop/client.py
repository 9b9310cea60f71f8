#!/usr/bin/env python3
"""Interop MCP client built only on the official `mcp` Python SDK (stdio or Streamable HTTP).

Usage:
    python client.py [options] SCENARIO -- COMMAND [ARGS...]
    python client.py [options] --url URL [--header 'Name: value']... [--unix-socket PATH] SCENARIO

COMMAND ARGS is launched as a stdio MCP server by the SDK's stdio client (in the
supervisor's tests: `mcp-supervisor attach NAME -c CONFIG`). With --url the SDK's
Streamable HTTP client transport talks to URL instead (no COMMAND): every --header
is sent on every HTTP request (e.g. `Authorization: Bearer TOKEN`), and with
--unix-socket PATH the HTTP connection goes to that Unix socket (URL's host is then
only a placeholder, e.g. http://localhost/mcp). The script connects
in the requested protocol era, runs SCENARIO, prints one JSON object per step on
stdout (`{"step": ..., "ok": true, ...}`) and exits 0 only if every assertion
held. On failure it prints a `{"step": ..., "ok": false, "error": ...}` line,
a `client.py: FAIL: ...` message on stderr, and exits 1 (2 for usage errors).

Scenarios:
    everything  @modelcontextprotocol/server-everything: tools/list contains echo,
                get-sum and trigger-long-running-operation; echo round-trips a
                unique message; get-sum(2, 3) says 5; the long-running tool sends
                >= 2 progress notifications before its result.
    time        mcp-server-time: get_current_time(UTC) and convert_time.
    tools       any server: tools/list is non-empty.
    features    server-everything: the server's own requests, answered by this client's
                callbacks: trigger-sampling-request returns the sampled text,
                trigger-elicitation-request returns the elicited name (in the 2026 era
                they arrive as input_required rounds; in the handshake era as requests).
    fastmcp     tests/interop/fastmcp_server.py: echo; count returns its result (progress
                notifications counted, not required: fastmcp races them with the result);
                ask_name returns the elicited name (unless --skip-elicit).
    roots       server-filesystem started with no directory: list_allowed_directories comes
                to name --expect-dirs (default: the paths of --roots, this client's roots)
                and never any of --forbid-dirs.
    outage      any server behind a stopped supervisor child: tools/list is served
                (non-empty) and calling --outage-tool
                returns a readable outage (isError, "status=") with no SDK validation error.
    survive     the fake server (echo {text}, slow {ms}) while the test kills and restarts the
                supervisor: echo works; prints {"step": "ready"}; with --in-flight-tool the
                call in flight at the crash returns the outage record (isError,
                "status=disconnected"); waits for the line "go" on stdin; echo works again
                in the same session (no new initialize on the client side).

Endpoints (--prefix PREFIX, default empty): every tool name the scenario lists as
required, calls or checks for (including --outage-tool's) is PREFIX + name, e.g.
`--prefix everything__` makes echo `everything__echo`: for a supervisor endpoint
(`[endpoints.NAME]`), which serves each source's tools renamed SOURCE__NAME. Resource
URIs are never prefixed. Without --prefix the names are used as they are.

Eras (--era), mapped onto the SDK 2.x `mcp.Client(mode=...)` setting:
    handshake   mode="legacy": the `initialize` handshake (protocol <= 2025-11-25).
    modern      mode="2026-07-28": no handshake, every request carries the
                2026-07-28 `_meta` envelope (fails against a handshake-only server).
    auto        mode="auto" (the SDK default): probe `server/discover`, fall back to
                `initialize` when the server does not answer it as a modern server.

The server's stderr is passed through to this process's stderr. The child gets
this process's full environment (the SDK would otherwise pass only HOME, PATH,
...), so variables such as RUST_LOG reach `mcp-supervisor attach`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
import traceback
import uuid
from typing import Any, Awaitable, Callable

try:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
    import httpx2  # the HTTP client the mcp 2.x SDK is built on (a fork of httpx)
    from mcp.shared.exceptions import MCPError
    from pydantic import ValidationError
    from mcp.types import CallToolResult, Implementation, TextContent
    from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS
except ImportError as e:  # pragma: no cover - environment problem
    print(
        f"client.py: FAIL: cannot import the mcp SDK ({e}); run .ci/install-deps and use "
        "the interpreter in $MCPSUP_INTEROP_PYTHON (.interop/client-venv/bin/python)",
        file=sys.stderr,
    )
    sys.exit(1)

try:
    BaseExceptionGroup
except NameError:  # Python 3.10: anyio depends on the backport there
    from exceptiongroup import BaseExceptionGroup  # type: ignore[no-redef]

ERA_TO_MODE = {"handshake": "legacy", "modern": LATEST_MODERN_VERSION, "auto": "auto"}
SCENARIOS = ("everything", "time", "tools", "features", "outage", "fastmcp", "roots", "survive", "loop")


class Failure(Exception):
    """An assertion about the server's behaviour did not hold."""


def emit(step: str, ok: bool = True, **details: Any) -> None:
    record = {"step": step, "ok": ok, **details}
    sys.stdout.write(json.dumps(record, default=str) + "\n")
    sys.stdout.flush()


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise Failure(msg)


def named(args: argparse.Namespace, name: str) -> str:
    """A tool's (or prompt's) name as the server serves it: --prefix PREFIX + name."""
    return args.prefix + name


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


# --------------------------------------------------------------------------------------------
# Scenario runner: every request goes through `Runner.step`, which times it, prints the JSON
# line, and turns exceptions into a failed step naming the step.


class Runner:
    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args
        self.steps_ok = 0

    async def step(
        self, name: str, iteration: int, fn: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        started = time.monotonic()
        try:
            details = await fn()
        except Failure as e:
            emit(name, False, iteration=iteration, error=str(e))
            raise Failure(f"step {name!r} (iteration {iteration}): {e}") from None
        except MCPError as e:
            emit(name, False, iteration=iteration, error=f"MCP error {e.code}: {e.message}")
            raise Failure(f"step {name!r} (iteration {iteration}): MCP error {e.code}: {e.message}") from e
        except ValidationError as e:
            # The SDK validates every result against the negotiated protocol version.
            summary = "; ".join(f"{'.'.join(map(str, err['loc'])) or '<root>'}: {err['msg']}" for err in e.errors()[:5])
            msg = f"result does not conform to protocol {self.client.protocol_version}: {summary}"
            emit(name, False, iteration=iteration, error=msg)
            raise Failure(f"step {name!r} (iteration {iteration}): {msg}") from e
        ms = round((time.monotonic() - started) * 1000, 1)
        emit(name, True, iteration=iteration, ms=ms, **details)
        self.steps_ok += 1
        return details

    async def list_tools(self, iteration: int, required: tuple[str, ...] = ()) -> list[str]:
        names: list[str] = []

        async def run() -> dict[str, Any]:
            cursor: str | None = None
            for _ in range(100):  # bounded pagination
                page = await self.client.list_tools(cursor=cursor)
                names.extend(t.name for t in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            check(len(names) > 0, "tools/list returned no tools")
            missing = [n for n in required if n not in names]
            check(not missing, f"tools missing from tools/list: {missing} (got {names})")
            return {"count": len(names), "tools": names}

        await self.step("list_tools", iteration, run)
        return names

    async def call(self, name: str, arguments: dict[str, Any], **kw: Any) -> CallToolResult:
        result = await self.client.call_tool(name, arguments, **kw)
        check(not result.is_error, f"tool {name} returned isError=true: {text_of(result)!r}")
        return result


async def scenario_tools(r: Runner, iteration: int) -> None:
    await r.list_tools(iteration)


async def scenario_everything(r: Runner, iteration: int) -> None:
    echo_tool, sum_tool = named(r.args, "echo"), named(r.args, "get-sum")
    long_tool = named(r.args, "trigger-long-running-operation")
    await r.list_tools(iteration, required=(echo_tool, sum_tool, long_tool))

    message = f"interop {r.args.client_name} pid={os.getpid()} it={iteration} {uuid.uuid4().hex}"

    async def echo() -> dict[str, Any]:
        text = text_of(await r.call(echo_tool, {"message": message}))
        check(message in text, f"echo text {text!r} does not contain {message!r}")
        return {"sent": message, "text": text}

    await r.step("echo", iteration, echo)

    async def get_sum() -> dict[str, Any]:
        text = text_of(await r.call(sum_tool, {"a": 2, "b": 3}))
        check(re.search(r"(?<![\d.])5(?![\d])", text) is not None, f"get-sum(2, 3) text {text!r} does not say 5")
        return {"text": text}

    await r.step("get_sum", iteration, get_sum)

    steps = r.args.progress_steps
    duration = r.args.progress_duration

    async def long_running() -> dict[str, Any]:
        seen: list[tuple[float, float | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total))

        result = await r.call(
            long_tool, {"duration": duration, "steps": steps}, progress_callback=on_progress
        )
        text = text_of(result)
        # The SDK runs progress callbacks as spawned tasks: give the ones already received
        # (they precede the response on the wire) a moment to run before counting.
        with anyio.move_on_after(2):
            while len(seen) < steps:
                await anyio.sleep(0.01)
        check("completed" in text.lower(), f"{long_tool} final text {text!r} does not report completion")
        check(len(seen) >= 2, f"expected >= 2 progress notifications, got {len(seen)}: {seen}")
        values = sorted(p for p, _ in seen)
        check(len(set(values)) == len(values), f"duplicate progress values: {seen}")
        check(all(t == steps for _, t in seen), f"progress total != {steps}: {seen}")
        return {"progress_notifications": len(seen), "progress": values, "text": text}

    await r.step("long_running_progress", iteration, long_running)


async def scenario_time(r: Runner, iteration: int) -> None:
    current_tool, convert_tool = named(r.args, "get_current_time"), named(r.args, "convert_time")
    names = await r.list_tools(iteration, required=(current_tool,))

    async def current() -> dict[str, Any]:
        result = await r.call(current_tool, {"timezone": "UTC"})
        text = text_of(result)
        check("UTC" in text, f"get_current_time(UTC) text {text!r} does not mention UTC")
        check(
            re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", text) is not None,
            f"get_current_time(UTC) text {text!r} has no ISO datetime",
        )
        return {"text": text, "structured": result.structured_content}

    await r.step("get_current_time", iteration, current)

    if convert_tool in names:

        async def convert() -> dict[str, Any]:
            result = await r.call(
                convert_tool,
                {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
            )
            text = text_of(result)
            check("Asia/Tokyo" in text, f"convert_time text {text!r} does not mention Asia/Tokyo")
            check("21:00" in text, f"convert_time 12:00 UTC->Asia/Tokyo text {text!r} does not say 21:00")
            return {"text": text}

        await r.step("convert_time", iteration, convert)


async def scenario_features(r: Runner, iteration: int) -> None:
    sampling_tool = named(r.args, "trigger-sampling-request")
    elicitation_tool = named(r.args, "trigger-elicitation-request")
    await r.list_tools(iteration, required=(sampling_tool, elicitation_tool))

    async def sampling() -> dict[str, Any]:
        result = await r.call(sampling_tool, {"prompt": f"interop {iteration}", "maxTokens": 5})
        text = text_of(result)
        check(SAMPLED in text, f"the sampled text is not in the result: {text!r}")
        return {"chars": len(text)}

    async def elicitation() -> dict[str, Any]:
        result = await r.call(elicitation_tool, {})
        text = text_of(result)
        check(ELICITED in text, f"the elicited name is not in the result: {text!r}")
        return {"chars": len(text)}

    await r.step("sampling", iteration, sampling)
    await r.step("elicitation", iteration, elicitation)


async def scenario_outage(r: Runner, iteration: int) -> None:
    names = await r.list_tools(iteration)
    check(len(names) > 0, "no tools served from the cache during the outage")

    async def call() -> dict[str, Any]:
        result = await r.client.call_tool(named(r.args, r.args.outage_tool), {})
        text = text_of(result)
        check(result.is_error, f"the outage call did not return isError: {text!r}")
        check("status=" in text, f"not an outage record: {text!r}")
        return {"text": text[:200]}

    await r.step("outage_call", iteration, call)


async def scenario_survive(r: Runner, iteration: int) -> None:
    """The supervisor crashes and comes back under one session (tests/it/survive.rs)."""
    tag = uuid.uuid4().hex

    async def echo(word: str) -> dict[str, Any]:
        sent = f"{word} {tag}"
        text = text_of(await r.call(named(r.args, "echo"), {"text": sent}))
        check(text == sent, f"echo said {text!r}, not {sent!r}")
        return {"text": text}

    await r.step("before", iteration, lambda: echo("before"))
    emit("ready")
    if r.args.in_flight_tool:
        async def in_flight() -> dict[str, Any]:
            result = await r.client.call_tool(named(r.args, r.args.in_flight_tool), {"ms": 120000})
            text = text_of(result)
            check(result.is_error, f"the call in flight at the crash did not fail: {text!r}")
            check("status=disconnected" in text, f"not the outage record: {text!r}")
            return {"text": text[:200]}

        await r.step("in_flight", iteration, in_flight)
    # The test writes a line once the supervisor is back.
    line = await anyio.to_thread.run_sync(sys.stdin.readline)
    check(line.strip() == "go", f"stdin said {line!r}, not go")
    await r.step("after", iteration, lambda: echo("after"))


async def scenario_loop(r: Runner, iteration: int) -> None:
    """Calls echo with a new text each time until a line arrives on stdin (tests/it/upgrade.rs):
    every call must be answered with exactly its own text."""
    stop = anyio.Event()

    async def watch_stdin() -> None:
        await anyio.to_thread.run_sync(sys.stdin.readline)
        stop.set()

    calls = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_stdin)
        emit("ready")
        while not stop.is_set():
            calls += 1
            sent = f"loop {r.args.client_name} {calls} {uuid.uuid4().hex}"

            async def echo() -> dict[str, Any]:
                text = text_of(await r.call(named(r.args, "echo"), {"text": sent}))
                check(text == sent, f"echo said {text!r}, not {sent!r}")
                return {}

            await r.step("echo", calls, echo)
        tg.cancel_scope.cancel()
    emit("calls", True, count=calls)


async def scenario_fastmcp(r: Runner, iteration: int) -> None:
    echo_tool, count_tool, ask_tool = (named(r.args, n) for n in ("echo", "count", "ask_name"))
    await r.list_tools(iteration, required=(echo_tool, count_tool, ask_tool))

    async def echo() -> dict[str, Any]:
        text = text_of(await r.call(echo_tool, {"message": f"fm {iteration}"}))
        check(text == f"Echo: fm {iteration}", f"echo said {text!r}")
        return {}

    async def count() -> dict[str, Any]:
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        text = text_of(await r.call(count_tool, {"steps": 3}, progress_callback=on_progress))
        check(text == "counted 3", f"count said {text!r}")
        # fastmcp 4.2 writes progress concurrently with the result: how many arrive before it
        # varies run to run, directly too, so the count is reported, not required.
        return {"progress": len(seen)}

    async def ask_name() -> dict[str, Any]:
        text = text_of(await r.call(ask_tool, {}))
        check(ELICITED in text, f"ask_name said {text!r}")
        return {}

    await r.step("echo", iteration, echo)
    await r.step("progress", iteration, count)
    if not r.args.skip_elicit:
        await r.step("elicitation", iteration, ask_name)


async def scenario_roots(r: Runner, iteration: int) -> None:
    from urllib.parse import urlparse

    expect = r.args.expect_dirs.split(",") if r.args.expect_dirs is not None else [urlparse(u).path for u in r.args.roots]
    expect = [d for d in expect if d]
    forbid = [d for d in (r.args.forbid_dirs or "").split(",") if d]

    async def allowed() -> dict[str, Any]:
        # The server asks for roots after the handshake, asynchronously: poll for up to 10 s.
        deadline = time.monotonic() + 10
        text = ""
        while True:
            text = text_of(await r.client.call_tool(named(r.args, "list_allowed_directories"), {}))
            if all(d in text for d in expect) or time.monotonic() > deadline:
                break
            await anyio.sleep(0.1)
        for d in expect:
            check(d in text, f"{d} not allowed: {text!r}")
        for d in forbid:
            check(d not in text, f"{d} allowed: {text!r}")
        return {"text": text[:300]}

    await r.step("allowed_directories", iteration, allowed)


# What the callbacks answer (the scenario `features` looks for them in the tool results).
SAMPLED = "sampled-by-interop-client"
ELICITED = "Ada Lovelace"


def roots_callback(uris: list[str]) -> Any:
    async def on_list_roots(context: Any) -> Any:
        from mcp.types import ListRootsResult, Root

        return ListRootsResult(roots=[Root(uri=u) for u in uris])

    return on_list_roots


async def on_sampling(context: Any, params: Any) -> Any:
    from mcp.types import CreateMessageResult

    return CreateMessageResult(role="assistant", content=TextContent(type="text", text=SAMPLED), model="interop-model")


async def on_elicitation(context: Any, params: Any) -> Any:
    from mcp.types import ElicitResult

    # fastmcp asks for a bare string as {"value": ...}; server-everything for {"name": ...}.
    schema = getattr(params, "requested_schema", None) or {}
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    key = "value" if "value" in props else "name"
    return ElicitResult(action="accept", content={key: ELICITED})


SCENARIO_FNS = {
    "everything": scenario_everything,
    "time": scenario_time,
    "tools": scenario_tools,
    "features": scenario_features,
    "outage": scenario_outage,
    "fastmcp": scenario_fastmcp,
    "roots": scenario_roots,
    "survive": scenario_survive,
    "loop": scenario_loop,
}


# --------------------------------------------------------------------------------------------


def era_of(version: str | None) -> str:
    if version in MODERN_PROTOCOL_VERSIONS:
        return "modern"
    if version in HANDSHAKE_PROTOCOL_VERSIONS:
        return "handshake"
    return f"unknown({version})"


def http_client(args: argparse.Namespace) -> httpx2.AsyncClient:
    """The httpx2 client of --url: the SDK's default timeouts, every --header, --unix-socket."""
    headers: dict[str, str] = {}
    for h in args.header:
        name, _, value = h.partition(":")
        headers[name.strip()] = value.strip()
    kwargs: dict[str, Any] = {
        "headers": headers,
        "timeout": httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
    }
    if args.unix_socket:
        kwargs["transport"] = httpx2.AsyncHTTPTransport(uds=args.unix_socket)
    return httpx2.AsyncClient(**kwargs)


async def run(args: argparse.Namespace, command: list[str]) -> None:
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        if args.url:
            http = await stack.enter_async_context(http_client(args))
            server: Any = streamable_http_client(args.url, http_client=http)
            target: Any = args.url + (f" via {args.unix_socket}" if args.unix_socket else "")
        else:
            server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
            target = command
        await run_client(args, server, target)


async def run_client(args: argparse.Namespace, server: Any, command: Any) -> None:
    client = Client(
        server,
        mode=ERA_TO_MODE[args.era],
        client_info=Implementation(name=args.client_name, version="1.0.0"),
        read_timeout_seconds=args.request_timeout,
        cache=None,  # every call must reach the wire (no SEP-2549 response cache)
        sampling_callback=on_sampling,
        elicitation_callback=on_elicitation,
        list_roots_callback=roots_callback(args.roots),
    )
    started = time.monotonic()
    try:
        await client.__aenter__()
    except Exception as e:  # spawn failure, server exit, handshake error: all expected failure modes
        error = describe(e)
        emit("connect", False, requested_era=args.era, command=command, error=error)
        what = f"url {command}" if args.url else f"command {command}"
        raise Failure(f"connect (--era {args.era}, {what}) failed: {error}") from None
    try:
        version = client.protocol_version
        info = client.server_info
        negotiated = era_of(version)
        emit(
            "connect",
            True,
            requested_era=args.era,
            sdk_mode=ERA_TO_MODE[args.era],
            era=negotiated,
            protocol_version=version,
            server_name=info.name if info else None,
            server_version=info.version if info else None,
            ms=round((time.monotonic() - started) * 1000, 1),
        )
        problem = None
        if args.era != "auto" and negotiated != args.era:
            problem = f"requested era {args.era} but negotiated {version}"
        elif args.expect_era and negotiated != args.expect_era:
            problem = f"expected era {args.expect_era} but negotiated {version}"
        if problem:
            emit("era_check", False, error=problem)
            raise Failure(problem)

        runner = Runner(client, args)
        fn = SCENARIO_FNS[args.scenario]
        if args.concurrent and args.repeat > 1:
            async with anyio.create_task_group() as tg:
                for i in range(1, args.repeat + 1):
                    tg.start_soon(fn, runner, i)
        else:
            for i in range(1, args.repeat + 1):
                await fn(runner, i)
        emit(
            "done",
            True,
            scenario=args.scenario,
            era=negotiated,
            repeat=args.repeat,
            steps_ok=runner.steps_ok,
            ms=round((time.monotonic() - started) * 1000, 1),
        )
    finally:
        await client.__aexit__(None, None, None)


def describe(exc: BaseException) -> str:
    parts = []
    for leaf in leaves(exc):
        if isinstance(leaf, MCPError):
            parts.append(f"MCP error {leaf.code}: {leaf.message}")
        else:
            parts.append(f"{type(leaf).__name__}: {leaf}")
    return "; ".join(parts)


def leaves(exc: BaseException) -> list[BaseException]:
    """Flatten (Base)ExceptionGroups raised by anyio task groups."""
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for sub in exc.exceptions:
            out.extend(leaves(sub))
        return out
    return [exc]


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="client.py",
        usage="%(prog)s [options] SCENARIO -- COMMAND [ARGS...]\n       %(prog)s [options] --url URL [--header 'Name: value']... [--unix-socket PATH] SCENARIO",
        description="MCP interop client (official mcp SDK, stdio or Streamable HTTP transport).",
    )
    parser.add_argument("scenario", metavar="SCENARIO", choices=SCENARIOS, help=" | ".join(SCENARIOS))
    parser.add_argument("--era", choices=tuple(ERA_TO_MODE), default="auto", help="protocol era (default auto)")
    parser.add_argument("--expect-era", choices=("handshake", "modern"), help="assert the negotiated era")
    parser.add_argument("--timeout", type=float, default=60.0, help="overall timeout in seconds (default 60)")
    parser.add_argument("--request-timeout", type=float, default=None, help="per-request read timeout, seconds")
    parser.add_argument("--repeat", type=int, default=1, help="run the scenario's calls N times in one session")
    parser.add_argument("--concurrent", action="store_true", help="with --repeat: run the N iterations concurrently")
    parser.add_argument("--client-name", default="mcpsup-interop-client", help="clientInfo.name")
    parser.add_argument("--roots", type=lambda v: [u for u in v.split(",") if u], default=[], help="roots: this client's roots (URIs)")
    parser.add_argument("--expect-dirs", default=None, help="roots: directories that must be allowed (comma-separated)")
    parser.add_argument("--forbid-dirs", default=None, help="roots: directories that must not be allowed")
    parser.add_argument("--skip-elicit", action="store_true", help="fastmcp: do not call ask_name")
    parser.add_argument("--in-flight-tool", default=None, help="survive: the tool called (with {\"ms\": 120000}) while the supervisor is killed")
    parser.add_argument("--outage-tool", default="echo", help="the tool the outage scenario calls (--prefix applies)")
    parser.add_argument("--prefix", default="", metavar="PREFIX", help="prepended to every tool name the scenario uses, e.g. everything__ for an endpoint (default none)")
    parser.add_argument("--progress-steps", type=int, default=3, help="steps for the long-running tool (>= 2)")
    parser.add_argument("--progress-duration", type=float, default=0.6, help="seconds for the long-running tool")
    parser.add_argument("--url", default=None, help="connect to this Streamable HTTP endpoint instead of launching COMMAND")
    parser.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'", help="with --url: an HTTP header for every request (repeatable)")
    parser.add_argument("--unix-socket", default=None, metavar="PATH", help="with --url: HTTP over this Unix socket (URL's host is a placeholder)")
    if "--" not in argv:
        args = parser.parse_args(argv)  # handles --help and other usage errors first
        if not args.url:
            parser.error("missing '-- COMMAND [ARGS...]' (or --url URL)")
        command: list[str] = []
    else:
        sep = argv.index("--")
        args = parser.parse_args(argv[:sep])
        command = argv[sep + 1 :]
        if args.url:
            parser.error("--url and '-- COMMAND' are mutually exclusive")
        if not command:
            parser.error("missing COMMAND after '--'")
    if not args.url and (args.header or args.unix_socket):
        parser.error("--header and --unix-socket need --url")
    for h in args.header:
        if ":" not in h or not h.partition(":")[0].strip():
            parser.error(f"--header {h!r}: expected 'Name: value'")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    if args.progress_steps < 2:
        parser.error("--progress-steps must be >= 2")
    if args.timeout <= 0:
        parser.error("--timeout must be > 0")
    return args, command


def main(argv: list[str]) -> int:
    args, command = parse(argv)

    # Last-resort watchdog in case cancellation itself wedges (e.g. an unkillable child).
    def hard_timeout() -> None:
        print(f"client.py: FAIL: hard timeout ({args.timeout + 15:.0f}s), exiting", file=sys.stderr, flush=True)
        os._exit(1)

    watchdog = threading.Timer(args.timeout + 15, hard_timeout)
    watchdog.daemon = True
    watchdog.start()

    async def bounded() -> bool:
        with anyio.move_on_after(args.timeout) as scope:
            await run(args, command)
        return not scope.cancelled_caught

    try:
        finished = anyio.run(bounded)
    except BaseException as exc:  # noqa: BLE001 - report everything, exit 1
        if isinstance(exc, KeyboardInterrupt):
            print("client.py: FAIL: interrupted", file=sys.stderr)
            return 1
        if isinstance(exc, SystemExit):
            raise
        hint = (
            " [note: --era modern skips the initialize handshake and needs a server that speaks protocol "
            f"{LATEST_MODERN_VERSION}; handshake-only servers (e.g. server-everything) cannot pass]"
            if args.era == "modern"
            else ""
        )
        for leaf in leaves(exc):
            if isinstance(leaf, Failure):
                print(f"client.py: FAIL: {leaf}{hint}", file=sys.stderr)
            else:
                print(f"client.py: FAIL: unexpected {type(leaf).__name__}: {leaf}", file=sys.stderr)
                traceback.print_exception(leaf, file=sys.stderr)
        return 1
    if not finished:
        emit("timeout", False, error=f"overall timeout of {args.timeout}s expired")
        print(f"client.py: FAIL: overall timeout of {args.timeout}s expired (scenario {args.scenario})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
