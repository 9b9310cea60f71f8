#!/usr/bin/env node
// Interop MCP client built only on the official TypeScript SDK v2 (`@modelcontextprotocol/client`,
// stdio transport); the feature check the supervisor's interop tests run directly against a
// server and through `mcp-supervisor attach`.
//
// Usage:
//   node ts_client.mjs --mode auto|legacy|2026-07-28 [--expect-era handshake|modern] \
//       [--roots URI,URI] SCENARIO -- COMMAND [ARGS...]
//
// The SDK is imported from $MCPSUP_INTEROP_NODE_MODULES (installed by .ci/install-deps).
// Prints one JSON object per step (`{"step":..,"ok":true,..}`) and exits 0 only if every check
// held; on failure prints `{"step":..,"ok":false,"error":..}` and exits 1 (2 for usage errors).
//
// Scenarios:
//   features   server-everything: tools/list; echo; trigger-sampling-request returns the text
//              the sampling handler gave; trigger-elicitation-request returns the elicited name;
//              trigger-long-running-operation sends progress.
//   outage     any server behind a stopped supervisor child: tools/list is served and a call to
//              --outage-tool returns a readable outage (isError, "status="), no schema error.
//   roots      server-filesystem started with no directory: list_allowed_directories names
//              exactly the roots this client declared (--roots).

import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

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
    const sep = argv.indexOf('--');
    if (sep < 0 || sep === argv.length - 1) {
        process.stderr.write('usage: ts_client.mjs [options] SCENARIO -- COMMAND [ARGS...]\n');
        process.exit(2);
    }
    const opts = { mode: 'auto', expectEra: null, roots: [], outageTool: 'echo', scenario: null };
    const head = argv.slice(0, sep);
    for (let i = 0; i < head.length; i++) {
        const a = head[i];
        if (a === '--mode') opts.mode = head[++i];
        else if (a === '--expect-era') opts.expectEra = head[++i];
        else if (a === '--roots') opts.roots = head[++i].split(',').filter(Boolean);
        else if (a === '--outage-tool') opts.outageTool = head[++i];
        else opts.scenario = a;
    }
    return { opts, command: argv.slice(sep + 1) };
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
    const base = process.env.MCPSUP_INTEROP_NODE_MODULES;
    if (!base) fail('setup', 'MCPSUP_INTEROP_NODE_MODULES is not set (run .ci/install-deps)');
    const sdk = await import(pathToFileURL(join(base, '@modelcontextprotocol/client/dist/index.mjs')).href);
    const stdio = await import(pathToFileURL(join(base, '@modelcontextprotocol/client/dist/stdio.mjs')).href);
    const mode = opts.mode === 'auto' || opts.mode === 'legacy' ? opts.mode : { pin: opts.mode };
    const client = new sdk.Client(
        { name: 'mcpsup-ts-interop', version: '1.0.0' },
        {
            capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } },
            versionNegotiation: { mode },
        },
    );
    client.setRequestHandler('sampling/createMessage', async () => ({
        model: 'interop-model',
        role: 'assistant',
        content: { type: 'text', text: SAMPLED },
    }));
    client.setRequestHandler('elicitation/create', async () => ({
        action: 'accept',
        content: { name: ELICITED },
    }));
    client.setRequestHandler('roots/list', async () => ({
        roots: opts.roots.map((uri) => ({ uri })),
    }));
    const transport = new stdio.StdioClientTransport({
        command: command[0],
        args: command.slice(1),
        env: { ...process.env },
        stderr: 'inherit',
    });
    await step('connect', async () => {
        await client.connect(transport);
        const version = client.getNegotiatedProtocolVersion();
        const era = version === '2026-07-28' ? 'modern' : 'handshake';
        if (opts.expectEra) check(era === opts.expectEra, `expected era ${opts.expectEra}, negotiated ${version}`);
        return { protocol_version: version, era };
    });
    try {
        await SCENARIOS[opts.scenario](client, opts);
        emit('done', true, { scenario: opts.scenario });
    } finally {
        await client.close().catch(() => {});
    }
}

const SCENARIOS = {
    async features(client) {
        await step('list_tools', async () => {
            const { tools } = await client.listTools();
            const names = tools.map((t) => t.name);
            for (const n of ['echo', 'trigger-sampling-request', 'trigger-elicitation-request']) {
                check(names.includes(n), `${n} missing from ${names}`);
            }
            return { count: names.length };
        });
        await step('echo', async () => {
            const r = await client.callTool({ name: 'echo', arguments: { message: 'ts interop' } });
            check(text(r).includes('ts interop'), text(r));
        });
        await step('sampling', async () => {
            const r = await client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'hi', maxTokens: 5 } });
            check(text(r).includes(SAMPLED), text(r));
        });
        await step('elicitation', async () => {
            const r = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
            check(text(r).includes(ELICITED), text(r));
        });
        await step('progress', async () => {
            let n = 0;
            const r = await client.callTool(
                { name: 'trigger-long-running-operation', arguments: { duration: 0.5, steps: 3 } },
                { onprogress: () => { n += 1; } },
            );
            check(!r.isError, text(r));
            check(n >= 2, `${n} progress notifications`);
            return { progress: n };
        });
    },
    async outage(client, opts) {
        await step('list_tools', async () => {
            const { tools } = await client.listTools();
            check(tools.length > 0, 'no tools');
            return { count: tools.length };
        });
        await step('outage_call', async () => {
            const r = await client.callTool({ name: opts.outageTool, arguments: {} });
            check(r.isError === true, `not isError: ${text(r)}`);
            check(text(r).includes('status='), `not an outage record: ${text(r)}`);
            return { text: text(r).slice(0, 200) };
        });
    },
    async roots(client, opts) {
        await step('allowed_directories', async () => {
            const r = await client.callTool({ name: 'list_allowed_directories', arguments: {} });
            const t = text(r);
            for (const uri of opts.roots) {
                check(t.includes(new URL(uri).pathname), `${uri} not allowed: ${t}`);
            }
            return { text: t.slice(0, 300) };
        });
    },
};

main().catch((e) => fail('main', e?.stack ?? e));
