#!/usr/bin/env python3
"""Proves check.py fails on broken manifests; run by deploy/kubernetes/validate after check.py.

Copies deploy/kubernetes to a temporary directory, checks that the copy passes, then for each
case below breaks one thing in a fresh copy and requires check.py to exit 1 with the expected
message. A validator that passes everything would fail here.

    selftest.py --binary target/release/mcp-supervisor [--kubernetes-version 1.30 ...]
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (name, file, old text, new text, text the failure must contain)
CASES = [
    ("misspelt field (strict schema)", "base/deployment.yaml",
     "terminationGracePeriodSeconds: 20", "terminationGracePeriodSecond: 20",
     "Additional properties are not allowed"),
    ("wrong type (schema)", "base/service.yaml",
     "timeoutSeconds: 3600", "timeoutSeconds: an hour", "is not of type"),
    ("misspelt kind (no schema is an error)", "base/poddisruptionbudget.yaml",
     "kind: PodDisruptionBudget", "kind: PodDisruptionBudgett", "no schema"),
    ("misspelt PodMonitor key (subset schema)", "components/podmonitor/podmonitor.yaml",
     "podMetricsEndpoints:", "podMetricEndpoints:", "PodMonitor subset schema"),
    ("bad PodMonitor duration", "components/podmonitor/podmonitor.yaml",
     "interval: 30s", "interval: 30 seconds", "does not match"),
    ("duplicate YAML key", "base/service.yaml",
     "  type: ClusterIP\n", "  type: ClusterIP\n  type: NodePort\n", "duplicate key"),
    ("Service targetPort names no port", "base/service.yaml",
     "targetPort: http", "targetPort: htpp", "targetPort `htpp`"),
    ("Service selector matches no pod", "base/service.yaml",
     "    app.kubernetes.io/instance: everything\n  ports:", "    app.kubernetes.io/instance: evrything\n  ports:",
     "matches no pod"),
    ("NetworkPolicy rule names no port", "base/networkpolicy.yaml",
     "        - port: metrics", "        - port: metric", "ingress port `metric`"),
    ("NetworkPolicy selects no pod", "base/networkpolicy.yaml",
     "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: mcp-supervisor",
     "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: mcp-supervisr",
     "podSelector"),
    ("probe on an unknown port", "base/deployment.yaml",
     "path: /readyz\n              port: metrics", "path: /readyz\n              port: metric",
     "readinessProbe uses port `metric`"),
    ("grace period below the stop ladder", "base/deployment.yaml",
     "terminationGracePeriodSeconds: 20", "terminationGracePeriodSeconds: 12",
     "terminationGracePeriodSeconds 12 <="),
    ("stop ladder raised above the grace period", "base/supervisor.toml",
     'kill_timeout = "5s"', 'kill_timeout = "15s"', "terminationGracePeriodSeconds 20 <="),
    ("socket_dir on a disk emptyDir", "base/deployment.yaml",
     "            medium: Memory\n            sizeLimit: 1Mi", "            sizeLimit: 1Mi",
     "disk emptyDir"),
    ("metrics port not the container's", "base/supervisor.toml",
     'metrics_listen = "0.0.0.0:9464"', 'metrics_listen = "0.0.0.0:9465"', "no port 9465"),
    ("Service name missing from http_allowed_hosts", "base/supervisor.toml",
     '    "mcp-everything.mcp.svc",\n', "", "http_allowed_hosts lacks"),
    ("missing resource file", "base/kustomization.yaml",
     "  - poddisruptionbudget.yaml", "  - pdb.yaml", "does not exist"),
    ("ConfigMap volume not generated", "sidecar/deployment.yaml",
     "name: mcp-sidecar-config", "name: mcp-sidecar-conf", "neither generates nor has"),
    ("sidecar volume mounted by nobody", "sidecar/deployment.yaml",
     "            - name: supervisor-tmp\n              mountPath: /tmp\n", "",
     "volume `supervisor-tmp` is mounted by no container"),
    ("config check-config rejects (bad duration)", "sidecar/supervisor.toml",
     'stop_grace = "2s"', "stop_grace = 2", "check-config exited 2"),
    ("remote metrics without the allow flag", "base/supervisor.toml",
     "metrics_allow_remote = true\n", "", "metrics_allow_remote = true to serve"),
]


def run_check(root, args):
    cmd = [sys.executable, str(root / "check.py"), "--root", str(root)]
    if args.binary:
        cmd += ["--binary", args.binary]
    for v in args.versions or []:
        cmd += ["--kubernetes-version", v]
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="mcp-supervisor binary for check-config")
    ap.add_argument("--kubernetes-version", action="append", dest="versions")
    args = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="k8s-selftest-") as tmp:
        pristine = Path(tmp) / "pristine"
        shutil.copytree(HERE, pristine, ignore=shutil.ignore_patterns("__pycache__"))
        r = run_check(pristine, args)
        if r.returncode != 0:
            print("selftest: the unbroken copy does not pass, so no case can prove anything:")
            print(r.stdout[-3000:], r.stderr[-2000:])
            return 1
        for i, (name, rel, old, new, expect) in enumerate(CASES):
            t0 = time.monotonic()
            if not args.binary and "check-config" in expect:
                print(f"skip {name}: no --binary")
                continue
            copy = Path(tmp) / f"case{i}"
            shutil.copytree(pristine, copy)
            f = copy / rel
            text = f.read_text()
            if text.count(old) != 1:
                print(f"FAIL {name}: `{old}` is not exactly once in {rel}: update the case")
                failures += 1
                continue
            f.write_text(text.replace(old, new))
            r = run_check(copy, args)
            took = time.monotonic() - t0
            if r.returncode == 1 and expect in r.stdout:
                print(f"ok   {name}: rejected ({took:.1f}s)")
            else:
                failures += 1
                print(f"FAIL {name}: check.py exited {r.returncode}, wanted 1 with `{expect}`")
                print(r.stdout[-2000:], r.stderr[-2000:])
            shutil.rmtree(copy)
    print(f"selftest: {len(CASES) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
