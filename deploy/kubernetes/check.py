#!/usr/bin/env python3
"""Checks deploy/kubernetes without a cluster; run by deploy/kubernetes/validate.

1. Every kustomization (kustomization.yaml under deploy/kubernetes) resolves: its resources,
   components, patches and configMapGenerator files exist and are of the right kind, and each
   patch and `images` entry names something the kustomization has.
2. Every manifest a kustomization lists validates against the Kubernetes OpenAPI schemas that
   kubernetes-validate ships, strictly (unknown fields are errors), for each version asked.
   A kind it has no schema for is an error, except PodMonitor (a CRD), which is checked
   against a structural subset of its schema written below.
3. Cross-references no schema sees: selectors match pod labels (NetworkPolicy podSelector
   too), named ports exist (Service targets, probes, PodMonitor, NetworkPolicy rules), volumes are
   mounted, ConfigMap volumes name a generated ConfigMap, the scrape annotation's port is the
   metrics port.
4. Each generated supervisor.toml agrees with its manifests: listen ports are the container
   ports, http_token_file is on the token volume, socket_dir is inside a memory-backed emptyDir
   (not its root), the Service's names are in http_allowed_hosts, and
   terminationGracePeriodSeconds covers preStop + the slowest stop ladder + 2 s of HTTP close.
   Then `mcp-supervisor check-config --portable` (the binary given by --binary) accepts it:
   syntax and values, not the users, groups and files of the host running this check.

Exit 0 when all is well, 1 otherwise; every problem is printed.
"""

import argparse
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import yaml

import kubernetes_validate
from kubernetes_validate import utils as kv_utils

# Seconds the supervisor may spend closing HTTP connections after its children have stopped
# (crates/front/src/http/mod.rs: a graceful close is given 2 s).
HTTP_CLOSE_S = 2

PROBLEMS = []
CHECKED_CONFIGS = set()  # each supervisor.toml goes through check-config once


def problem(where, msg):
    PROBLEMS.append(f"{where}: {msg}")
    print(f"FAIL {where}: {msg}")


def ok(msg):
    print(f"ok   {msg}")


# ---------------------------------------------------------------------------------------------
# YAML: like the API server, a duplicated key is an error (PyYAML would keep the last one).


class StrictLoader(yaml.SafeLoader):
    pass


def _mapping_no_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                             _mapping_no_duplicates)


def load_docs(path):
    try:
        with open(path) as f:
            return [d for d in yaml.load_all(f, Loader=StrictLoader) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        problem(path, f"cannot read YAML: {e}")
        return []


# ---------------------------------------------------------------------------------------------
# PodMonitor: the Prometheus Operator's CRD. kubernetes-validate has no schema for it; this is
# the subset of monitoring.coreos.com/v1 PodMonitor that these manifests may use, with unknown
# fields rejected so a misspelt key fails. It is not the CRD's full schema.

DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
RELABEL = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "action": {"type": "string"},
            "modulus": {"type": "integer"},
            "regex": {"type": "string"},
            "replacement": {"type": "string"},
            "separator": {"type": "string"},
            "sourceLabels": {"type": "array", "items": {"type": "string"}},
            "targetLabel": {"type": "string"},
        },
    },
}
PODMONITOR_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
                "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "additionalProperties": False,
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector"],
            "properties": {
                "selector": LABEL_SELECTOR,
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "jobLabel": {"type": "string"},
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                "sampleLimit": {"type": "integer", "minimum": 0},
                "podMetricsEndpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "portNumber": {"type": "integer", "minimum": 1, "maximum": 65535},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                            "interval": {"type": "string", "pattern": DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": DURATION},
                            "honorLabels": {"type": "boolean"},
                            "honorTimestamps": {"type": "boolean"},
                            "params": {"type": "object"},
                            "relabelings": RELABEL,
                            "metricRelabelings": RELABEL,
                        },
                    },
                },
            },
        },
    },
}
CRD_SCHEMAS = {("monitoring.coreos.com/v1", "PodMonitor"): PODMONITOR_SCHEMA}


def validate_schema(path, doc, versions):
    kind, api = doc.get("kind"), doc.get("apiVersion")
    name = (doc.get("metadata") or {}).get("name")
    what = f"{path} {kind}/{name}"
    if (api, kind) in CRD_SCHEMAS:
        errors = sorted(jsonschema.Draft202012Validator(CRD_SCHEMAS[(api, kind)]).iter_errors(doc),
                        key=lambda e: list(e.path))
        for e in errors:
            problem(what, f"{'.'.join(map(str, e.path))}: {e.message} (PodMonitor subset schema)")
        if not errors:
            ok(f"{what}: PodMonitor structure (subset of the CRD schema; not the cluster's CRD)")
        return
    for v in versions:
        try:
            got = kubernetes_validate.validate(doc, v, strict=True)
            ok(f"{what}: Kubernetes {got} schema, strict")
        except kubernetes_validate.ValidationError as e:
            problem(what, f"Kubernetes {e.version}: {'.'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            problem(what, f"no schema: {e.message} (a typo in kind/apiVersion, or an unhandled CRD)")
        except kv_utils.VersionNotSupportedError:
            problem(what, f"kubernetes-validate {kubernetes_validate.__version__} has no schemas for {v}")


# ---------------------------------------------------------------------------------------------
# Kustomizations.

KUSTOMIZATION_KEYS = {
    "apiVersion", "kind", "namespace", "namePrefix", "nameSuffix", "resources", "components",
    "patches", "configMapGenerator", "secretGenerator", "generatorOptions", "images", "labels",
    "commonAnnotations", "replicas",
}


class Built:
    """What a kustomization produces: objects (with the file they come from) and the names of
    the ConfigMaps it generates, with their source files."""

    def __init__(self):
        self.objects = []          # (path, doc)
        self.generated = {}        # ConfigMap name -> [files]
        self.images = set()


def build(kdir, versions, validated, stack=()):
    """Resolves kustomization KDIR (recursively); validates every resource file once."""
    kfile = kdir / "kustomization.yaml"
    out = Built()
    if kdir in stack:
        problem(kfile, "cycle through " + " -> ".join(map(str, stack)))
        return out
    if not kfile.is_file():
        problem(kdir, "no kustomization.yaml")
        return out
    docs = load_docs(kfile)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        problem(kfile, "must hold one mapping")
        return out
    k = docs[0]
    kind = k.get("kind")
    expect_api = {"Kustomization": "kustomize.config.k8s.io/v1beta1",
                  "Component": "kustomize.config.k8s.io/v1alpha1"}
    if kind not in expect_api or k.get("apiVersion") != expect_api[kind]:
        problem(kfile, f"kind/apiVersion {kind}/{k.get('apiVersion')} is neither "
                "Kustomization kustomize.config.k8s.io/v1beta1 nor Component .../v1alpha1")
    for key in sorted(set(k) - KUSTOMIZATION_KEYS):
        problem(kfile, f"unknown or unhandled key `{key}`")

    for entry in k.get("resources") or []:
        target = (kdir / entry).resolve()
        if target.is_dir():
            sub = build(target, versions, validated, stack + (kdir,))
            if (target / "kustomization.yaml").is_file() and \
                    (load_docs(target / "kustomization.yaml") or [{}])[0].get("kind") == "Component":
                problem(kfile, f"resource {entry} is a Component: list it under `components`")
            merge(out, sub)
        elif target.is_file():
            file_docs = load_docs(target)
            if not file_docs:
                problem(target, "no object")
            for d in file_docs:
                if not isinstance(d, dict) or not d.get("kind") or not (d.get("metadata") or {}).get("name"):
                    problem(target, "an object without kind or metadata.name")
                    continue
                if target not in validated:
                    validate_schema(target, d, versions)
                out.objects.append((target, d))
            validated.add(target)
        else:
            problem(kfile, f"resource {entry} does not exist")

    for entry in k.get("components") or []:
        target = (kdir / entry).resolve()
        sub_k = load_docs(target / "kustomization.yaml") if (target / "kustomization.yaml").is_file() else []
        if not sub_k or sub_k[0].get("kind") != "Component":
            problem(kfile, f"component {entry} is not a directory with a kind: Component kustomization")
            continue
        merge(out, build(target, versions, validated, stack + (kdir,)))

    for gen in k.get("configMapGenerator") or []:
        files = []
        for f in gen.get("files") or []:
            src = (kdir / f.split("=", 1)[-1]).resolve()
            if not src.is_file():
                problem(kfile, f"configMapGenerator {gen.get('name')}: file {f} does not exist")
            files.append(src)
        out.generated[gen.get("name")] = files

    for patch in k.get("patches") or []:
        if "path" in patch:
            ppath = (kdir / patch["path"]).resolve()
            pdocs = load_docs(ppath) if ppath.is_file() else []
            if not pdocs:
                problem(kfile, f"patch {patch['path']} does not exist or is empty")
                continue
            for p in pdocs:
                key = (p.get("kind"), (p.get("metadata") or {}).get("name"))
                if patch.get("target") is None and not any(
                        (d.get("kind"), d["metadata"]["name"]) == key for _, d in out.objects):
                    problem(ppath, f"patches {key[0]}/{key[1]}, which this kustomization does not have")
                else:
                    ok(f"{ppath}: patches {key[0]}/{key[1]}")
                    apply_null_deletes(out, key, p)
        elif "patch" not in patch:
            problem(kfile, "a patch with neither path nor patch")

    images = {c.get("image", "").rsplit(":", 1)[0].split("@")[0]
              for _, d in out.objects for c in containers(d)}
    for img in k.get("images") or []:
        if img.get("name") not in images:
            problem(kfile, f"images: no container uses image `{img.get('name')}` (has: {sorted(images)})")
    out.namespace = k.get("namespace") or getattr(out, "namespace", None)
    return out


def merge(out, sub):
    out.objects += sub.objects
    out.generated.update(sub.generated)
    if getattr(sub, "namespace", None):
        out.namespace = sub.namespace


def apply_null_deletes(out, key, patch):
    """The one strategic-merge effect the cross-checks need: `annotation: null` deletes it."""
    anns = (((patch.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}
    for i, (p, d) in enumerate(out.objects):
        if (d.get("kind"), d["metadata"]["name"]) != key:
            continue
        d = yaml.safe_load(yaml.safe_dump(d))  # a copy: the file's own object stays as written
        tmeta = d.get("spec", {}).get("template", {}).get("metadata", {})
        for a, v in anns.items():
            if v is None:
                tmeta.get("annotations", {}).pop(a, None)
            else:
                tmeta.setdefault("annotations", {})[a] = v
        out.objects[i] = (p, d)


# ---------------------------------------------------------------------------------------------
# Cross-references.


def pod_spec(d):
    if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return ((d.get("spec") or {}).get("template") or {}).get("spec") or {}
    if d.get("kind") == "Pod":
        return d.get("spec") or {}
    return None


def pod_labels(d):
    if d.get("kind") == "Pod":
        return (d.get("metadata") or {}).get("labels") or {}
    return (((d.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def containers(d):
    ps = pod_spec(d)
    if not ps:
        return []
    return (ps.get("initContainers") or []) + (ps.get("containers") or [])


def selects(selector, labels):
    ml = selector.get("matchLabels", selector if "matchExpressions" not in selector else {})
    if not isinstance(ml, dict) or not ml:
        return False
    return all(labels.get(k) == v for k, v in ml.items())


def port_names(c):
    return {p.get("name"): p.get("containerPort") for p in c.get("ports") or [] if p.get("name")}


def cross_check(name, built):
    pods = [(p, d) for p, d in built.objects if pod_spec(d) is not None]
    cms = set(built.generated) | {d["metadata"]["name"] for _, d in built.objects if d["kind"] == "ConfigMap"}
    for path, d in pods:
        what = f"{path} {d['kind']}/{d['metadata']['name']}"
        ps = pod_spec(d)
        sel = ((d.get("spec") or {}).get("selector") or {})
        if d["kind"] != "Pod" and not selects(sel, pod_labels(d)):
            problem(what, "spec.selector does not match the pod template's labels")
        vols = {v["name"]: v for v in ps.get("volumes") or []}
        mounted = set()
        for c in containers(d):
            names = port_names(c)
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
                if isinstance(port, str) and port not in names:
                    problem(what, f"container {c['name']}: {probe} uses port `{port}`, not one of its ports {sorted(names)}")
            for m in c.get("volumeMounts") or []:
                mounted.add(m["name"])
                if m["name"] not in vols:
                    problem(what, f"container {c['name']}: mounts volume `{m['name']}`, which the pod does not have")
        for v in vols:
            if v not in mounted:
                problem(what, f"volume `{v}` is mounted by no container")
        for v in vols.values():
            cm = (v.get("configMap") or {}).get("name")
            if cm and cm not in cms:
                problem(what, f"volume `{v['name']}` uses ConfigMap `{cm}`, which this kustomization neither generates nor has")
        ann = (((d.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}
        if ann.get("prometheus.io/scrape") == "true":
            port = ann.get("prometheus.io/port")
            all_ports = {p.get("containerPort") for c in containers(d) for p in c.get("ports") or []}
            if not port or not port.isdigit() or int(port) not in all_ports:
                problem(what, f"prometheus.io/port `{port}` is no container port of the pod {sorted(all_ports)}")
        ok(f"{what}: selector, probe ports, volumes, ConfigMaps, scrape annotations")

    for path, d in built.objects:
        what = f"{path} {d['kind']}/{d['metadata']['name']}"
        kind = d["kind"]
        if kind in ("Service", "PodDisruptionBudget", "PodMonitor"):
            spec = d.get("spec") or {}
            sel = spec.get("selector") or {}
            if kind == "Service":
                sel = {"matchLabels": sel}
            matched = [pd for _, pd in pods if selects(sel, pod_labels(pd))]
            if not matched:
                problem(what, f"selector {sel} matches no pod of this kustomization")
                continue
            if kind == "Service":
                for sp in spec.get("ports") or []:
                    tp = sp.get("targetPort")
                    if isinstance(tp, str) and not any(tp in port_names(c) for pd in matched for c in containers(pd)):
                        problem(what, f"targetPort `{tp}` is no named port of the selected pods")
            if kind == "PodMonitor":
                for ep in spec.get("podMetricsEndpoints") or []:
                    if ep.get("port") and not any(ep["port"] in port_names(c) for pd in matched for c in containers(pd)):
                        problem(what, f"port `{ep['port']}` is no named port of the selected pods")
            ok(f"{what}: selects {', '.join(pd['kind'] + '/' + pd['metadata']['name'] for pd in matched)}")
        if kind == "NetworkPolicy":
            spec = d.get("spec") or {}
            matched = [pd for _, pd in pods if selects(spec.get("podSelector") or {}, pod_labels(pd))]
            if not matched:
                problem(what, f"podSelector {spec.get('podSelector')} matches no pod of this kustomization")
                continue
            for rule in spec.get("ingress") or []:
                for rp in rule.get("ports") or []:
                    port = rp.get("port")
                    if isinstance(port, str) and not all(
                            any(port in port_names(c) for c in containers(pd)) for pd in matched):
                        problem(what, f"ingress port `{port}` is no named port of every selected pod")
            ok(f"{what}: selects {', '.join(pd['kind'] + '/' + pd['metadata']['name'] for pd in matched)}, named ports exist")


# ---------------------------------------------------------------------------------------------
# supervisor.toml against the manifests that mount it.

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def seconds(text):
    if not isinstance(text, str):
        raise ValueError(f"duration {text!r} is not a string with a unit (check-config says more)")
    total, rest = 0.0, text.replace(" ", "")
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", rest):
        total += float(num) * UNITS[unit]
    if not re.fullmatch(r"((\d+(?:\.\d+)?)(ms|s|m|h))+", rest):
        raise ValueError(f"cannot read duration {text!r}")
    return total


def mount_for(c, path):
    """The volumeMount of container C that holds PATH (longest mountPath prefix)."""
    best = None
    for m in c.get("volumeMounts") or []:
        mp = m["mountPath"].rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (best is None or len(mp) > len(best["mountPath"])):
            best = m
    return best


def check_config_against(name, built, cm_name, toml_path, binary):
    what = f"{toml_path} ({name})"
    try:
        with open(toml_path, "rb") as f:
            cfg = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        problem(what, f"not TOML: {e}")
        return
    sup = cfg.get("supervisor") or {}
    defaults = cfg.get("defaults") or {}
    servers = cfg.get("servers") or {}
    users = []  # (pod object, container) that mount this ConfigMap
    for _, d in built.objects:
        ps = pod_spec(d)
        if ps is None:
            continue
        vol_names = {v["name"] for v in ps.get("volumes") or [] if (v.get("configMap") or {}).get("name") == cm_name}
        for c in containers(d):
            if any(m["name"] in vol_names for m in c.get("volumeMounts") or []):
                users.append((d, c))
    if not users:
        problem(what, f"no container mounts the ConfigMap `{cm_name}`")
    for d, c in users:
        where = f"{what} in {d['kind']}/{d['metadata']['name']} container {c['name']}"
        ps = pod_spec(d)
        vols = {v["name"]: v for v in ps.get("volumes") or []}
        ports = {p.get("containerPort"): p.get("name") for p in c.get("ports") or []}
        # The config must be where the image's entrypoint reads it.
        m = mount_for(c, "/etc/mcp-supervisor/supervisor.toml")
        if m is None or vols.get(m["name"], {}).get("configMap", {}).get("name") != cm_name:
            problem(where, "the ConfigMap is not mounted at /etc/mcp-supervisor (the image's --config)")
        # Listen addresses: non-loopback ones must be container ports.
        for key, default in (("http_listen", "127.0.0.1:8931"), ("metrics_listen", None)):
            addr = sup.get(key, default)
            if not addr or addr == "off":
                continue
            host, _, port = addr.rpartition(":")
            if host not in ("127.0.0.1", "localhost", "[::1]") and int(port) not in ports:
                problem(where, f"{key} = {addr!r} but the container has no port {port}")
        # Probes need metrics_listen on a non-loopback address.
        probes = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe") if c.get(p)]
        if probes:
            addr = sup.get("metrics_listen", "")
            host, _, port = addr.rpartition(":")
            if not addr or host in ("127.0.0.1", "localhost", "[::1]"):
                problem(where, f"the kubelet probes need metrics_listen on the pod's address (is {addr!r})")
            for p in probes:
                pp = p.get("httpGet", {}).get("port")
                if (ports.get(int(port)) if port.isdigit() else None) != pp and pp != (int(port) if port.isdigit() else None):
                    problem(where, f"a probe uses port {pp!r}, metrics_listen is {addr!r}")
        # socket_dir: below a memory-backed emptyDir (tmpfs root 1777), never its root.
        sd = sup.get("socket_dir")
        if not sd or not sd.startswith("/"):
            problem(where, f"socket_dir must be an absolute path inside a volume (is {sd!r})")
        else:
            m = mount_for(c, sd)
            v = vols.get(m["name"]) if m else None
            if v is None or "emptyDir" not in v:
                problem(where, f"socket_dir {sd} is not inside an emptyDir (the root filesystem is read-only)")
            elif (v["emptyDir"] or {}).get("medium") != "Memory":
                problem(where, f"socket_dir {sd} is on a disk emptyDir (mode 0777, no sticky bit): the supervisor refuses it; use medium: Memory")
            elif m["mountPath"].rstrip("/") == sd.rstrip("/"):
                problem(where, f"socket_dir {sd} is the emptyDir's root (mode 1777, writable by all): use a subdirectory")
        # Token files on a mounted Secret.
        for sname, s in servers.items():
            tf = s.get("http_token_file", defaults.get("http_token_file"))
            if tf:
                m = mount_for(c, tf)
                if m is None or "secret" not in vols.get(m["name"], {}):
                    problem(where, f"servers.{sname}.http_token_file {tf} is not on a mounted Secret")
        # The Service's DNS names must pass the Host check.
        ns = getattr(built, "namespace", None)
        if (sup.get("http_listen") or "127.").split(":")[0] not in ("127.0.0.1", "localhost", "[::1]"):
            for _, svc in built.objects:
                if svc["kind"] == "Service" and selects({"matchLabels": (svc.get("spec") or {}).get("selector") or {}}, pod_labels(d)):
                    want = [svc["metadata"]["name"]] + ([f"{svc['metadata']['name']}.{ns}.svc"] if ns else [])
                    for h in want:
                        if h not in (sup.get("http_allowed_hosts") or []):
                            problem(where, f"http_allowed_hosts lacks {h!r}, the Service's name: clients get 403")
        # terminationGracePeriodSeconds >= preStop sleep + slowest ladder + HTTP close.
        try:
            ladder = max([seconds(s.get("stop_grace", defaults.get("stop_grace", "2s")))
                          + seconds(s.get("kill_timeout", defaults.get("kill_timeout", "5s")))
                          for s in servers.values()] or [0])
        except ValueError as e:
            problem(where, str(e))
            continue
        pre = (((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds", 0)
        need = pre + ladder + HTTP_CLOSE_S
        grace = ps.get("terminationGracePeriodSeconds", 30)
        if grace <= need:
            problem(where, f"terminationGracePeriodSeconds {grace} <= preStop {pre} + stop ladder {ladder:g} + HTTP close {HTTP_CLOSE_S} = {need:g} s")
        else:
            ok(f"{where}: grace {grace} s > preStop {pre} + ladder {ladder:g} + HTTP close {HTTP_CLOSE_S} = {need:g} s; ports, socket_dir, token, hosts agree")
    if binary and toml_path not in CHECKED_CONFIGS:
        CHECKED_CONFIGS.add(toml_path)
        # --portable: the file runs in the pod, not here (its token file is on a Secret mounted
        # there, its users and groups are the image's), so only its syntax and values are checked.
        r = subprocess.run([binary, "check-config", "--portable", str(toml_path)], capture_output=True, text=True)
        out = (r.stdout + r.stderr).strip()
        if r.returncode != 0:
            problem(what, f"{binary} check-config exited {r.returncode}: {out}")
        else:
            ok(f"{what}: check-config: {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=Path(__file__).resolve().parent, type=Path,
                    help="the directory holding the kustomizations (default: this file's)")
    ap.add_argument("--kubernetes-version", action="append", dest="versions",
                    help="Kubernetes version(s) whose schemas to validate against (repeatable)")
    ap.add_argument("--binary", help="mcp-supervisor binary for check-config (omit to skip)")
    args = ap.parse_args()
    versions = args.versions or ["1.30", kv_utils.major_minor(kv_utils.latest_version())]
    print(f"kubernetes-validate {kubernetes_validate.__version__}; schemas of Kubernetes {', '.join(versions)}")

    root = args.root.resolve()
    kdirs = sorted(p.parent for p in root.rglob("kustomization.yaml"))
    if not kdirs:
        problem(root, "no kustomization.yaml found")
    validated = set()
    for kdir in kdirs:
        k = (load_docs(kdir / "kustomization.yaml") or [{}])[0]
        if k.get("kind") == "Component":
            continue  # checked as part of the kustomizations that use it
        name = str(kdir.relative_to(root))
        print(f"== {name}")
        built = build(kdir, versions, validated)
        cross_check(name, built)
        for cm, files in built.generated.items():
            for f in files:
                if f.suffix == ".toml":
                    check_config_against(name, built, cm, f, args.binary)
    # Every YAML file under root must be used by some kustomization (else it is never checked).
    used = set(validated)
    for kdir in kdirs:
        used.add((kdir / "kustomization.yaml").resolve())
        k = (load_docs(kdir / "kustomization.yaml") or [{}])[0]
        used |= {(kdir / p["path"]).resolve() for p in k.get("patches") or [] if "path" in p}
    for y in sorted(list(root.rglob("*.yaml")) + list(root.rglob("*.yml"))):
        if y.resolve() not in used:
            problem(y, "is in no kustomization, so nothing checks it")
    print()
    if PROBLEMS:
        print(f"{len(PROBLEMS)} problem(s)")
        return 1
    print("all manifests valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
