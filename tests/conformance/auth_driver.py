#!/usr/bin/env python3
"""The supervisor as the OAuth *client* of the conformance suite's `auth/*` scenarios (issue 30 §4).

usage (by the suite, which appends the scenario server's URL and sets MCP_CONFORMANCE_SCENARIO,
and MCP_CONFORMANCE_CONTEXT for the scenarios with pre-registered credentials):
    conformance client --scenario auth/NAME --command "python3 tests/conformance/auth_driver.py SUPERVISOR"

It writes a config with one url server, `up`, pointing at the scenario's URL, configured the way
an operator would for that kind of server:
    auth/pre-registration           [servers.up.oauth] client_id + client_secret_file
    auth/client-credentials-basic   grant = "client_credentials", client_id + client_secret_file
    auth/client-credentials-jwt     grant = "client_credentials", client_id + private_key_file
    every other auth/* scenario     client_metadata_url (used only where the authorization
                                    server supports client ID metadata documents; else DCR)
then runs `SUPERVISOR run` and acts as a person and an MCP client would:
  - whenever the server is `auth_required` (at start, or after a call answered with the
    outage class `auth_failed` and status `auth_required`: a step-up), it runs
    `SUPERVISOR login up` with $BROWSER set to browser.sh (which fetches the authorization URL
    and follows the redirects to the supervisor's loopback listener: the suite's authorization
    servers approve by themselves), at most 3 times;
  - through `SUPERVISOR attach up`: initialize, tools/list, tools/call test-tool; a call refused
    for want of a sign-in is sent again after the login.
Everything toward the scenario's servers (discovery, registration, PKCE, the token requests,
the bearer token, the step-up) is the supervisor's, and what the suite checks. Exits 0 when
the tool call got its answer; 1 otherwise (the supervisor's log goes to stderr).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_driver import Run, text_of  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CIMD_URL = "https://conformance-test.local/client-metadata.json"
MAX_LOGINS = 3


def secret_file(tmp: str, name: str, text: str) -> str:
    path = os.path.join(tmp, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def oauth_table(tmp: str, scenario: str) -> str:
    ctx = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    lines = ["[servers.up.oauth]", 'login_timeout = "30s"']
    if scenario in ("auth/pre-registration", "auth/client-credentials-basic"):
        lines.append(f"client_id = {json.dumps(ctx['client_id'])}")
        lines.append(f"client_secret_file = {json.dumps(secret_file(tmp, 'secret', ctx['client_secret']))}")
        if scenario == "auth/client-credentials-basic":
            lines.append('grant = "client_credentials"')
    elif scenario == "auth/client-credentials-jwt":
        lines.append('grant = "client_credentials"')
        lines.append(f"client_id = {json.dumps(ctx['client_id'])}")
        lines.append(f"private_key_file = {json.dumps(secret_file(tmp, 'key.pem', ctx['private_key_pem']))}")
        lines.append(f"signing_algorithm = {json.dumps(ctx.get('signing_algorithm') or 'ES256')}")
    else:
        lines.append(f"client_metadata_url = {json.dumps(CIMD_URL)}")
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    supervisor, url = sys.argv[1], sys.argv[2]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "auth/metadata-default")
    secrets = tempfile.mkdtemp(prefix="mcpsup-conformance-secrets-")
    try:
        run = Run(
            supervisor,
            url,
            supervisor_keys=f"token_dir = {json.dumps(os.path.join(secrets, 'tokens'))}\n",
            server_extra=oauth_table(secrets, scenario),
        )
    except RuntimeError as e:
        print(f"auth_driver: {scenario}: {e}", file=sys.stderr)
        return 1
    config = run.config
    logins = 0

    def state() -> str:
        out = subprocess.run([supervisor, "status", "up", "--json", "-c", config], capture_output=True, text=True)
        try:
            return json.loads(out.stdout)["servers"][0]["state"]
        except (ValueError, KeyError, IndexError):
            return "?"

    def login() -> None:
        nonlocal logins
        logins += 1
        if logins > MAX_LOGINS:
            raise RuntimeError("still not signed in after 3 logins")
        env = dict(os.environ, BROWSER=os.path.join(HERE, "browser.sh"))
        r = subprocess.run([supervisor, "login", "up", "-c", config], env=env, capture_output=True, text=True, timeout=90)
        if r.returncode != 0:
            raise RuntimeError(f"login exited {r.returncode}: {r.stderr.strip()}")

    def settled() -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            s = state()
            if s not in ("starting", "idle", "?", "backoff"):
                return s
            time.sleep(0.1)
        return state()

    def needs_sign_in(resp: dict) -> bool:
        outage = (resp.get("result", {}).get("_meta", {}) or {}).get("mcp-supervisor/outage") or (
            resp.get("error", {}).get("data", {}) or {}
        )
        return isinstance(outage, dict) and outage.get("status") == "auth_required"

    try:
        if settled() == "auth_required":
            login()
        client = run.attach()

        def ask(method: str, params: dict) -> dict:
            while True:
                r = client.request(method, params)
                if not needs_sign_in(r):
                    return r
                settled()
                login()

        init = ask(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "conformance-auth-driver", "version": "1.0.0"},
            },
        )
        if "result" not in init:
            raise RuntimeError(f"initialize: {init}")
        client.notify("notifications/initialized")
        tools = ask("tools/list", {})
        names = [t["name"] for t in tools.get("result", {}).get("tools", [])]
        r = ask("tools/call", {"name": "test-tool", "arguments": {}})
        if "test" not in text_of(r):
            raise RuntimeError(f"test-tool: {r}")
        print(json.dumps({"scenario": scenario, "ok": True, "tools": names, "logins": logins}))
        return 0
    except Exception as e:  # noqa: BLE001 - any failure is the driver's verdict
        return run.fail("auth_driver", scenario, e)
    finally:
        run.close()


if __name__ == "__main__":
    sys.exit(main())
