// Preload that adds fixed HTTP headers (e.g. `Authorization: Bearer ...`) to every request the
// MCP conformance suite sends to the server under test.
//
// WHY: `conformance server` (0.1.x and 0.2.0-alpha.x) has no option for extra request headers,
// so it cannot test a server that requires a bearer token. tests/conformance/run --header uses
// this file instead of patching the suite.
//
// HOW: loaded with NODE_OPTIONS="--require .../inject-headers.cjs" (after node20-shim.cjs), it
// reads
//   MCPSUP_CONFORMANCE_HEADERS  JSON array of [name, value] pairs; unset or empty: do nothing
//   MCPSUP_CONFORMANCE_TARGET   the URL under test; headers are only added to requests whose
//                               scheme, host and port are the same (so they never leak to any
//                               other host); unset: every request
// and wraps the three HTTP client paths the suite uses:
//   - globalThis.fetch            (the TypeScript SDK client transport and raw probes)
//   - undici's request()          (e.g. dns-rebinding-protection); the suite's own copy of
//                                 `undici`, resolved from the entry script (process.argv[1])
//   - http/https.request and .get (e.g. the 2026-07-28 http-header-validation probes)
// A header is only added when the request does not already carry one of that name
// (case-insensitive): what a scenario sets on purpose (Host, Origin, MCP-Protocol-Version...)
// always wins.
'use strict';

const raw = process.env.MCPSUP_CONFORMANCE_HEADERS;
const extra = raw ? JSON.parse(raw) : [];

if (Array.isArray(extra) && extra.length > 0) {
    const path = require('node:path');
    const Module = require('node:module');

    const target = process.env.MCPSUP_CONFORMANCE_TARGET
        ? new URL(process.env.MCPSUP_CONFORMANCE_TARGET) : null;
    const defaultPort = (proto) => (proto === 'https:' ? '443' : '80');
    const sameOrigin = (protocol, hostname, port) => {
        if (!target) return true;
        const strip = (h) => String(h || '').replace(/^\[|\]$/g, '').toLowerCase();
        return protocol === target.protocol
            && strip(hostname) === strip(target.hostname)
            && String(port || defaultPort(protocol)) === String(target.port || defaultPort(target.protocol));
    };
    const urlMatches = (u) => {
        try {
            const x = new URL(String(u));
            return sameOrigin(x.protocol, x.hostname, x.port);
        } catch (_) {
            return false;
        }
    };

    // Headers as a plain object (undici/http accept objects, [k, v] pairs, or flat arrays).
    const toObject = (h) => {
        const out = {};
        if (!h) return out;
        if (Array.isArray(h)) {
            if (h.length > 0 && !Array.isArray(h[0])) {
                for (let i = 0; i + 1 < h.length; i += 2) out[h[i]] = h[i + 1];
            } else {
                for (const [k, v] of h) out[k] = v;
            }
        } else if (typeof h[Symbol.iterator] === 'function' && typeof h !== 'string') {
            for (const [k, v] of h) out[k] = v;
        } else {
            Object.assign(out, h);
        }
        return out;
    };
    const addMissing = (obj) => {
        const have = new Set(Object.keys(obj).map((k) => k.toLowerCase()));
        for (const [k, v] of extra) if (!have.has(String(k).toLowerCase())) obj[k] = v;
        return obj;
    };

    // 1. fetch
    if (typeof globalThis.fetch === 'function') {
        const origFetch = globalThis.fetch;
        globalThis.fetch = function fetch(input, init) {
            const isRequest = typeof Request !== 'undefined' && input instanceof Request;
            const url = isRequest ? input.url : (input instanceof URL ? input.href : input);
            if (!urlMatches(url)) return origFetch.call(this, input, init);
            const h = new Headers(init && init.headers !== undefined
                ? init.headers : (isRequest ? input.headers : undefined));
            for (const [k, v] of extra) if (!h.has(k)) h.set(k, v);
            return origFetch.call(this, input, { ...(init || {}), headers: h });
        };
    }

    // 2. undici.request (the suite imports `request` from its own undici; patch that module
    //    object before the ESM import reads its exports).
    const bases = [];
    if (process.argv[1]) bases.push(path.resolve(process.argv[1]));
    bases.push(__filename);
    for (const base of bases) {
        let undici;
        try {
            undici = Module.createRequire(base)('undici');
        } catch (_) {
            continue;
        }
        if (undici && typeof undici.request === 'function' && !undici.request.__mcpsupHeaders) {
            const origRequest = undici.request;
            const wrapped = function request(url, opts, ...rest) {
                let u = url;
                if (url && typeof url === 'object' && !(url instanceof URL)) {
                    u = String(url.origin || '') + String(url.path || '/');
                }
                if (!urlMatches(u)) return origRequest.call(this, url, opts, ...rest);
                const o = { ...(opts || {}) };
                o.headers = addMissing(toObject(o.headers));
                return origRequest.call(this, url, o, ...rest);
            };
            wrapped.__mcpsupHeaders = true;
            undici.request = wrapped;
        }
        break;
    }

    // 3. http/https.request and .get
    for (const name of ['http', 'https']) {
        const mod = require('node:' + name);
        const origReq = mod.request;
        const proto = name + ':';
        mod.request = function request(...args) {
            let url = null;
            let opts = null;
            let i = 0;
            if (typeof args[0] === 'string' || args[0] instanceof URL) {
                url = new URL(String(args[0]));
                i = 1;
            }
            if (args[i] && typeof args[i] === 'object') opts = args[i];
            const protocol = (opts && opts.protocol) || (url && url.protocol) || proto;
            let host = (opts && (opts.hostname || opts.host)) || (url && url.hostname) || 'localhost';
            if (opts && !opts.hostname && opts.host) host = String(opts.host).replace(/:\d+$/, '');
            const port = (opts && opts.port) || (url && url.port) || '';
            if (!sameOrigin(protocol, host, port)) return origReq.apply(this, args);
            const newOpts = { ...(opts || {}) };
            newOpts.headers = addMissing(toObject(newOpts.headers));
            const newArgs = args.slice();
            if (opts) newArgs[i] = newOpts;
            else newArgs.splice(i, 0, newOpts);
            return origReq.apply(this, newArgs);
        };
        mod.get = function get(...args) {
            const req = mod.request(...args);
            req.end();
            return req;
        };
    }
    // Let `import { request } from "http"` see the wrappers too.
    Module.syncBuiltinESMExports();
}
