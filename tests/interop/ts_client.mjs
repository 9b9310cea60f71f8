#!/usr/bin/env node
// Interop MCP client built only on the official TypeScript SDK: v2 (`@modelcontextprotocol/client`,
// both eras) or, with `--sdk v1`, v1 (`@modelcontextprotocol/sdk`, handshake era only); stdio
// or Streamable HTTP transport. The feature check the supervisor's interop tests run directly
// against a server and through `mcp-supervisor attach` or its HTTP endpoint.
//
// Usage:
//   node ts_client.mjs [--sdk v2|v1] --mode auto|legacy|2026-07-28 [--expect-era handshake|modern] \
//       [--roots URI,URI] [--prefix PREFIX] SCENARIO -- COMMAND [ARGS...]
//   node ts_client.mjs [options] --url URL [--header 'Name: value']... [--unix-socket PATH] SCENARIO
//
// With --url the SDK's StreamableHTTPClientTransport talks to URL instead of launching COMMAND:
// every --header goes on every HTTP request (`requestInit.headers`, e.g. `Authorization: Bearer
// TOKEN`); with --unix-socket PATH the transport's `fetch` is one on node:http with `socketPath`
// (no extra package), and URL's host is only a placeholder (e.g. http://localhost/mcp).
//
// With --prefix PREFIX (default empty) every tool and prompt name the scenario requires, calls
// or gets (--outage-tool's included) is PREFIX + name, e.g. `--prefix everything__` makes echo
// `everything__echo` and simple-prompt `everything__simple-prompt`: for a supervisor endpoint
// (`[endpoints.NAME]`), which serves each source's tools and prompts renamed SOURCE__NAME.
// Resource URIs are never prefixed. Without --prefix the names are used as they are.
//
// v2 is imported from $MCPSUP_INTEROP_NODE_MODULES, v1 from $MCPSUP_INTEROP_V1_NODE_MODULES
// (both installed by .ci/install-deps).
// Prints one JSON object per step (`{"step":..,"ok":true,..}`) and exits 0 only if every check
// held; on failure prints `{"step":..,"ok":false,"error":..}` and exits 1 (2 for usage errors).
//
// Scenarios:
//   features   server-everything: tools/list; echo; prompts (list, get simple-prompt);
//              resources (list, read the first); trigger-sampling-request returns the text the
//              sampling handler gave; trigger-elicitation-request returns the elicited name;
//              trigger-long-running-operation sends progress.
//   subscribe  server-everything: subscribe to a resource (2026: `subscriptions/listen`;
//              handshake: `resources/subscribe`), start the server's simulated updates
//              (toggle-subscriber-updates) and receive `notifications/resources/updated` for it.
//   fastmcp    tests/interop/fastmcp_server.py: echo; count returns its result (progress counted
//              and reported, not required: fastmcp races it with the result); ask_name returns
//              the elicited name (unless --skip-elicit).
//   outage     any server behind a stopped supervisor child: tools/list is served and a call to
//              --outage-tool returns a readable outage (isError, "status="), no schema error.
//   roots      server-filesystem started with no directory: list_allowed_directories comes to
//              name --expect-dirs (default: the paths of this client's --roots) and never any of
//              --forbid-dirs.

import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import { Readable } from 'node:stream';

const SAMPLED = 'sampled-by-ts-client';
const ELICITED = 'Grace Hopper';

function emit(step, ok, details = {}) {
    process.stdout.write(JSON.stringify({ step, ok, ...details }) + '\n');
}

function fail(step, error) {
    emit(step, false, { error: String(error) });
    process.stderr.write(`ts_client.mjs: FAIL: ${step}: ${error}\n`);
    process.exit(1);
}

function parse(argv) {
    const usage = (why) => {
        process.stderr.write(`ts_client.mjs: ${why}\nusage: ts_client.mjs [options] SCENARIO -- COMMAND [ARGS...]\n`
            + "       ts_client.mjs [options] --url URL [--header 'Name: value']... [--unix-socket PATH] SCENARIO\n");
        process.exit(2);
    };
    const sep = argv.indexOf('--');
    const opts = { sdk: 'v2', mode: 'auto', expectEra: null, roots: [], expectDirs: null, forbidDirs: [], outageTool: 'echo', prefix: '', scenario: null, url: null, headers: {}, unixSocket: null };
    const head = sep < 0 ? argv : argv.slice(0, sep);
    for (let i = 0; i < head.length; i++) {
        const a = head[i];
        if (a === '--mode') opts.mode = head[++i];
        else if (a === '--url') opts.url = head[++i];
        else if (a === '--unix-socket') opts.unixSocket = head[++i];
        else if (a === '--header') {
            const h = head[++i] ?? '';
            const colon = h.indexOf(':');
            if (colon <= 0) usage(`--header ${JSON.stringify(h)}: expected 'Name: value'`);
            opts.headers[h.slice(0, colon).trim()] = h.slice(colon + 1).trim();
        }
        else if (a === '--sdk') opts.sdk = head[++i];
        else if (a === '--expect-era') opts.expectEra = head[++i];
        else if (a === '--roots') opts.roots = head[++i].split(',').filter(Boolean);
        else if (a === '--outage-tool') opts.outageTool = head[++i];
        else if (a === '--prefix') {
            if (i + 1 >= head.length) usage('--prefix needs a value');
            opts.prefix = head[++i];
        }
        else if (a === '--skip-elicit') opts.skipElicit = true;
        else if (a === '--expect-dirs') opts.expectDirs = head[++i].split(',').filter(Boolean);
        else if (a === '--forbid-dirs') opts.forbidDirs = head[++i].split(',').filter(Boolean);
        else opts.scenario = a;
    }
    const command = sep < 0 ? [] : argv.slice(sep + 1);
    if (opts.url && sep >= 0) usage("--url and '-- COMMAND' are mutually exclusive");
    if (!opts.url && command.length === 0) usage("missing '-- COMMAND [ARGS...]' (or --url URL)");
    if (!opts.url && (opts.unixSocket || Object.keys(opts.headers).length)) usage('--header and --unix-socket need --url');
    if (!SCENARIOS[opts.scenario]) usage(`unknown scenario ${opts.scenario}`);
    return { opts, command };
}

// A tool's or prompt's name as the server serves it: --prefix PREFIX + name.
function named(opts, name) {
    return opts.prefix + name;
}

function text(result) {
    return (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

async function step(name, fn) {
    const started = Date.now();
    try {
        const details = (await fn()) ?? {};
        emit(name, true, { ms: Date.now() - started, ...details });
    } catch (e) {
        fail(name, e?.stack ?? e);
    }
}

function check(cond, msg) {
    if (!cond) throw new Error(msg);
}

async function main() {
    const { opts, command } = parse(process.argv.slice(2));
    const { client, stdio, http } = opts.sdk === 'v1' ? await clientV1(opts) : await clientV2(opts);
    const transport = opts.url
        ? new http.StreamableHTTPClientTransport(new URL(opts.url), {
            requestInit: { headers: opts.headers },
            ...(opts.unixSocket ? { fetch: unixSocketFetch(opts.unixSocket) } : {}),
        })
        : new stdio.StdioClientTransport({
            command: command[0],
            args: command.slice(1),
            env: { ...process.env },
            stderr: 'inherit',
        });
    await step('connect', async () => {
        await client.connect(transport);
        // v1 has no accessor (it speaks only the handshake era): version null, era handshake.
        const version = client.getNegotiatedProtocolVersion?.() ?? null;
        const era = version === '2026-07-28' ? 'modern' : 'handshake';
        if (opts.expectEra) check(era === opts.expectEra, `expected era ${opts.expectEra}, negotiated ${version}`);
        return { protocol_version: version, era };
    });
    try {
        await SCENARIOS[opts.scenario](client, opts);
        emit('done', true, { scenario: opts.scenario });
    } finally {
        // Over HTTP, close() alone leaves a handshake-era session open on the server: DELETE it.
        if (opts.url && transport.sessionId) await transport.terminateSession().catch(() => {});
        await client.close().catch(() => {});
    }
}

// A fetch (the SDKs' FetchLike) that sends the request over HTTP/1.1 to the Unix socket at
// socketPath with node:http, and streams the response body (SSE included) back as a web stream.
function unixSocketFetch(socketPath) {
    return async (input, init = {}) => {
        const req = new Request(input, init);
        const url = new URL(req.url);
        const body = req.body ? Buffer.from(await req.arrayBuffer()) : null;
        const headers = Object.fromEntries(req.headers);
        headers.host = url.host;
        if (body) headers['content-length'] = String(body.length);
        return new Promise((resolve, reject) => {
            const r = httpRequest({ socketPath, method: req.method, path: url.pathname + url.search, headers, signal: init.signal }, (res) => {
                const h = new Headers();
                for (const [k, v] of Object.entries(res.headers)) {
                    for (const one of Array.isArray(v) ? v : [v]) if (one !== undefined) h.append(k, one);
                }
                const empty = [101, 204, 205, 304].includes(res.statusCode) || req.method === 'HEAD';
                if (empty) res.resume();
                resolve(new Response(empty ? null : Readable.toWeb(res), { status: res.statusCode, statusText: res.statusMessage, headers: h }));
            });
            r.on('error', reject);
            r.end(body ?? undefined);
        });
    };
}

function handlers(opts) {
    return {
        sampling: async () => ({
            model: 'interop-model',
            role: 'assistant',
            content: { type: 'text', text: SAMPLED },
        }),
        // fastmcp asks for a bare string as {"value": ...}; server-everything for {"name": ...}.
        elicitation: async (request) => {
            const props = request.params?.requestedSchema?.properties ?? {};
            const key = 'value' in props ? 'value' : 'name';
            return { action: 'accept', content: { [key]: ELICITED } };
        },
        roots: async () => ({ roots: opts.roots.map((uri) => ({ uri })) }),
    };
}

const CAPABILITIES = { sampling: {}, elicitation: {}, roots: { listChanged: true } };

async function load(envVar, rel) {
    const base = process.env[envVar];
    if (!base) fail('setup', `${envVar} is not set (run .ci/install-deps)`);
    return import(pathToFileURL(join(base, rel)).href);
}

async function clientV2(opts) {
    const sdk = await load('MCPSUP_INTEROP_NODE_MODULES', '@modelcontextprotocol/client/dist/index.mjs');
    const stdio = await load('MCPSUP_INTEROP_NODE_MODULES', '@modelcontextprotocol/client/dist/stdio.mjs');
    const http = sdk; // StreamableHTTPClientTransport is exported by the package root
    const mode = opts.mode === 'auto' || opts.mode === 'legacy' ? opts.mode : { pin: opts.mode };
    const client = new sdk.Client(
        { name: 'mcpsup-ts-interop', version: '1.0.0' },
        { capabilities: CAPABILITIES, versionNegotiation: { mode } },
    );
    const h = handlers(opts);
    client.setRequestHandler('sampling/createMessage', h.sampling);
    client.setRequestHandler('elicitation/create', h.elicitation);
    client.setRequestHandler('roots/list', h.roots);
    return { client, stdio, http };
}

async function clientV1(opts) {
    const idx = await load('MCPSUP_INTEROP_V1_NODE_MODULES', '@modelcontextprotocol/sdk/dist/esm/client/index.js');
    const stdio = await load('MCPSUP_INTEROP_V1_NODE_MODULES', '@modelcontextprotocol/sdk/dist/esm/client/stdio.js');
    const types = await load('MCPSUP_INTEROP_V1_NODE_MODULES', '@modelcontextprotocol/sdk/dist/esm/types.js');
    const http = await load('MCPSUP_INTEROP_V1_NODE_MODULES', '@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js');
    const client = new idx.Client({ name: 'mcpsup-ts-v1-interop', version: '1.0.0' }, { capabilities: CAPABILITIES });
    const h = handlers(opts);
    client.setRequestHandler(types.CreateMessageRequestSchema, h.sampling);
    client.setRequestHandler(types.ElicitRequestSchema, h.elicitation);
    client.setRequestHandler(types.ListRootsRequestSchema, h.roots);
    return { client, stdio, http };
}

const SCENARIOS = {
    async features(client, opts) {
        await step('list_tools', async () => {
            const { tools } = await client.listTools();
            const names = tools.map((t) => t.name);
            for (const tool of ['echo', 'trigger-sampling-request', 'trigger-elicitation-request']) {
                const n = named(opts, tool);
                check(names.includes(n), `${n} missing from ${names}`);
            }
            return { count: names.length };
        });
        await step('echo', async () => {
            const r = await client.callTool({ name: named(opts, 'echo'), arguments: { message: 'ts interop' } });
            check(text(r).includes('ts interop'), text(r));
        });
        await step('prompts', async () => {
            const { prompts } = await client.listPrompts();
            const prompt = named(opts, 'simple-prompt');
            check(prompts.some((p) => p.name === prompt), JSON.stringify(prompts.map((p) => p.name)));
            const r = await client.getPrompt({ name: prompt });
            check(r.messages.length > 0, 'no messages');
            return { count: prompts.length };
        });
        await step('resources', async () => {
            const { resources } = await client.listResources();
            check(resources.length > 0, 'no resources');
            const r = await client.readResource({ uri: resources[0].uri });
            check(r.contents.length > 0 && r.contents[0].uri === resources[0].uri, JSON.stringify(r).slice(0, 200));
            return { count: resources.length };
        });
        await step('sampling', async () => {
            const r = await client.callTool({ name: named(opts, 'trigger-sampling-request'), arguments: { prompt: 'hi', maxTokens: 5 } });
            check(text(r).includes(SAMPLED), text(r));
        });
        await step('elicitation', async () => {
            const r = await client.callTool({ name: named(opts, 'trigger-elicitation-request'), arguments: {} });
            check(text(r).includes(ELICITED), text(r));
        });
        await step('progress', async () => {
            let n = 0;
            const params = { name: named(opts, 'trigger-long-running-operation'), arguments: { duration: 0.5, steps: 3 } };
            const options = { onprogress: () => { n += 1; } };
            // v1: callTool(params, resultSchema, options); v2: callTool(params, options).
            const r = opts.sdk === 'v1'
                ? await client.callTool(params, undefined, options)
                : await client.callTool(params, options);
            check(!r.isError, text(r));
            check(n >= 2, `${n} progress notifications`);
            return { progress: n };
        });
    },
    async subscribe(client, opts) {
        const { resources } = await client.listResources();
        check(resources.length > 0, 'no resources');
        const uri = resources[0].uri;
        let got;
        const updated = new Promise((resolve) => { got = resolve; });
        const onUpdated = (n) => { if (n.params?.uri === uri) got(n); };
        if (opts.sdk === 'v1') {
            const types = await load('MCPSUP_INTEROP_V1_NODE_MODULES', '@modelcontextprotocol/sdk/dist/esm/types.js');
            client.setNotificationHandler(types.ResourceUpdatedNotificationSchema, onUpdated);
        } else {
            client.setNotificationHandler('notifications/resources/updated', onUpdated);
        }
        await step('subscribe', async () => {
            if (client.getNegotiatedProtocolVersion?.() === '2026-07-28') {
                const sub = await client.listen({ resourceSubscriptions: [uri] });
                check((sub.honoredFilter.resourceSubscriptions ?? []).includes(uri), JSON.stringify(sub.honoredFilter));
                return { via: 'subscriptions/listen', uri };
            }
            await client.subscribeResource({ uri });
            return { via: 'resources/subscribe', uri };
        });
        await step('updated', async () => {
            // A toggle of the server's session: on a child shared with earlier clients it
            // may already be on, and this call turns it off; then turn it on again.
            const toggle = named(opts, 'toggle-subscriber-updates');
            const r = await client.callTool({ name: toggle, arguments: {} });
            if (text(r).startsWith('Stopped')) {
                await client.callTool({ name: toggle, arguments: {} });
            }
            const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('no update within 15 s')), 15_000));
            await Promise.race([updated, timeout]);
        });
    },
    async fastmcp(client, opts) {
        await step('echo', async () => {
            const r = await client.callTool({ name: named(opts, 'echo'), arguments: { message: 'fm' } });
            check(text(r) === 'Echo: fm', text(r));
        });
        await step('progress', async () => {
            let n = 0;
            const params = { name: named(opts, 'count'), arguments: { steps: 3 } };
            const options = { onprogress: () => { n += 1; } };
            const r = opts.sdk === 'v1'
                ? await client.callTool(params, undefined, options)
                : await client.callTool(params, options);
            check(text(r) === 'counted 3', text(r));
            // fastmcp 4.2 writes progress concurrently with the result, so how many arrive
            // before it varies run to run, directly too (0 to 3 seen): reported, not required.
            return { progress: n };
        });
        if (!opts.skipElicit) {
            await step('elicitation', async () => {
                const r = await client.callTool({ name: named(opts, 'ask_name'), arguments: {} });
                check(text(r).includes(ELICITED), text(r));
            });
        }
    },
    async outage(client, opts) {
        await step('list_tools', async () => {
            const { tools } = await client.listTools();
            check(tools.length > 0, 'no tools');
            return { count: tools.length };
        });
        await step('outage_call', async () => {
            const r = await client.callTool({ name: named(opts, opts.outageTool), arguments: {} });
            check(r.isError === true, `not isError: ${text(r)}`);
            check(text(r).includes('status='), `not an outage record: ${text(r)}`);
            return { text: text(r).slice(0, 200) };
        });
    },
    async roots(client, opts) {
        // The server asks for roots after the handshake, asynchronously: poll for up to 10 s.
        // --roots are this client's; --expect-dirs what the server must end up allowing
        // (default: this client's roots); --forbid-dirs what it must never allow.
        await step('allowed_directories', async () => {
            const expect = opts.expectDirs ?? opts.roots.map((u) => new URL(u).pathname);
            const end = Date.now() + 10_000;
            let t = '';
            for (;;) {
                const r = await client.callTool({ name: named(opts, 'list_allowed_directories'), arguments: {} });
                t = text(r);
                if (expect.every((d) => t.includes(d)) || Date.now() > end) break;
                await new Promise((res) => setTimeout(res, 100));
            }
            for (const d of expect) check(t.includes(d), `${d} not allowed: ${t}`);
            for (const d of opts.forbidDirs) check(!t.includes(d), `${d} allowed: ${t}`);
            return { text: t.slice(0, 300) };
        });
    },
};

main().catch((e) => fail('main', e?.stack ?? e));
