#!/usr/bin/env python3
"""The supervisor as the *client* of the conformance suite's client scenarios (issue 29 §5).

usage (by the suite, which appends the scenario server's URL and sets MCP_CONFORMANCE_SCENARIO):
    conformance client --scenario NAME --command "python3 tests/conformance/client_driver.py SUPERVISOR"

It writes a config with one url server, `up`, pointing at the scenario's URL, runs
`SUPERVISOR run` on it, and talks to the server through `SUPERVISOR attach up` the way an
MCP client does: initialize (declaring elicitation and sampling), tools/list, then what the
scenario asks of a client:
    initialize                            nothing more (the handshake is the test)
    tools_call                            add_numbers {a: 5, b: 3}, expecting 8
    elicitation-sep1034-client-defaults   test_client_elicitation_defaults; the elicitation
                                          request relayed by the supervisor is accepted with
                                          every field's default filled in
    sse-retry                             test_reconnection: the server closes the SSE stream
                                          of the call; the supervisor resumes it with GET and
                                          Last-Event-ID after the server's `retry`
Everything the supervisor does toward the scenario's server (its handshake, the era probe,
the headers, resuming SSE) is what the suite checks. Exits 0 when the scenario's call got
its answer; the supervisor's log goes to stderr on failure.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time


class Run:
    """`SUPERVISOR run` on a config with one url server, `up`, at `url`, in a fresh temporary
    directory: `supervisor_keys` and `server_extra` are TOML added to `[supervisor]` and after
    `[servers.up]`. Waits for the socket; `attach()` opens a client through `SUPERVISOR attach
    up`; `fail()` prints the supervisor's log; `close()` stops both."""

    def __init__(self, supervisor: str, url: str, supervisor_keys: str = "", server_extra: str = ""):
        self.supervisor = supervisor
        self.tmp = tempfile.mkdtemp(prefix="mcpsup-conformance-")
        run = os.path.join(self.tmp, "run")
        self.config = os.path.join(self.tmp, "supervisor.toml")
        with open(self.config, "w", encoding="utf-8") as f:
            f.write(
                "[supervisor]\n"
                f"socket_dir = {json.dumps(run)}\n"
                'http_listen = "off"\n' + supervisor_keys + "\n"
                "[servers.up]\n"
                f"url = {json.dumps(url)}\n"
                'probe_interval = "1h"\n\n' + server_extra
            )
        self.log = open(os.path.join(self.tmp, "supervisor.log"), "w+", encoding="utf-8")
        self.sup = subprocess.Popen(
            [supervisor, "run", "-c", self.config], stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL
        )
        self.attached = None
        sock = os.path.join(run, "up.sock")
        deadline = time.monotonic() + 15
        while not os.path.exists(sock):
            if time.monotonic() > deadline or self.sup.poll() is not None:
                raise RuntimeError("the supervisor did not start")
            time.sleep(0.05)

    def attach(self) -> "Client":
        self.attached = subprocess.Popen(
            [self.supervisor, "attach", "up", "-c", self.config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
        )
        return Client(self.attached)

    def fail(self, driver: str, scenario: str, e: Exception) -> int:
        self.log.flush()
        self.log.seek(0)
        print(f"{driver}: {scenario}: {e}\n--- supervisor log ---\n{self.log.read()}", file=sys.stderr)
        return 1

    def close(self) -> None:
        if self.attached is not None:
            self.attached.kill()
            self.attached.wait()
        self.sup.send_signal(signal.SIGTERM)
        try:
            self.sup.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.sup.kill()


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    supervisor, url = sys.argv[1], sys.argv[2]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    try:
        run = Run(supervisor, url)
    except RuntimeError as e:
        print(f"client_driver: {scenario}: {e}", file=sys.stderr)
        return 1
    try:
        client = run.attach()
        init = client.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {"elicitation": {}, "sampling": {}},
                "clientInfo": {"name": "conformance-driver", "version": "1.0.0"},
            },
        )
        check("result" in init, f"initialize: {init}")
        client.notify("notifications/initialized")
        tools = client.request("tools/list", {})
        names = [t["name"] for t in tools.get("result", {}).get("tools", [])]
        if scenario == "tools_call":
            r = client.call("add_numbers", {"a": 5, "b": 3})
            check("8" in text_of(r), f"add_numbers: {r}")
        elif scenario.startswith("elicitation-sep1034"):
            r = client.call("test_client_elicitation_defaults", {})
            check("Elicitation completed" in text_of(r), f"elicitation: {r}")
        elif scenario == "sse-retry":
            r = client.call("test_reconnection", {})
            check("successfully" in text_of(r), f"test_reconnection: {r}")
        print(json.dumps({"scenario": scenario, "ok": True, "tools": names}))
        return 0
    except Exception as e:  # noqa: BLE001 - any failure is the driver's verdict
        return run.fail("client_driver", scenario, e)
    finally:
        run.close()


def check(cond: bool, why: str) -> None:
    if not cond:
        raise RuntimeError(why)


def text_of(resp: dict) -> str:
    content = resp.get("result", {}).get("content", [])
    return " ".join(c.get("text", "") for c in content if isinstance(c, dict))


class Client:
    """JSON-RPC over attach's stdio: requests, and the server's requests answered."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.next_id = 1

    def send(self, msg: dict) -> None:
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def notify(self, method: str) -> None:
        self.send({"jsonrpc": "2.0", "method": method})

    def request(self, method: str, params: dict) -> dict:
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"attach closed while waiting for {method}")
            msg = json.loads(line)
            if "method" in msg and "id" in msg:
                self.answer(msg)
            elif msg.get("id") == rid:
                return msg

    def call(self, name: str, arguments: dict) -> dict:
        return self.request("tools/call", {"name": name, "arguments": arguments})

    def answer(self, req: dict) -> None:
        """The server's request, relayed by the supervisor: elicitation gets every default."""
        if req["method"] == "elicitation/create":
            props = req.get("params", {}).get("requestedSchema", {}).get("properties", {})
            content = {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}
            self.send({"jsonrpc": "2.0", "id": req["id"], "result": {"action": "accept", "content": content}})
        elif req["method"] == "ping":
            self.send({"jsonrpc": "2.0", "id": req["id"], "result": {}})
        else:
            self.send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    sys.exit(main())
