// Node 20 preload shim for the MCP conformance suite and the MCP Inspector CLI.
//
// WHY: @modelcontextprotocol/conformance (0.1.x and 0.2.0-alpha.x) does
//     import { globSync, ... } from "fs"
// at the top of its single bundled dist/index.js. fs.globSync only exists from Node 22, so on
// Debian's Node 20 the process dies while linking the module, before any code runs:
//     SyntaxError: The requested module 'fs' does not provide an export named 'globSync'
// The suite only calls it once, as globSync("**/checks.json", { cwd }) to summarise result
// directories, so a userland implementation is exact enough. We must not download a newer Node
// (only package registries are reachable), hence this shim.
//
// HOW: use it as a preload, for both CommonJS and ESM entry points:
//     NODE_OPTIONS="--require /abs/path/tests/conformance/node20-shim.cjs" node .../dist/index.js ...
// (tests/conformance/run does this.) On Node >= 22 (fs.globSync present) it does nothing.
// On Node 20 it
//   1. sets fs.globSync (for CommonJS users), implemented with the npm package `glob`, which
//      .ci/install-deps installs pinned into the same npm prefix as the suite;
//   2. registers an ESM resolve/load hook (module.register, Node >= 20.6) that hands every
//      ESM `import ... from "fs"` / "node:fs" a small facade module re-exporting the real fs
//      plus globSync. This hook is needed because the named exports of a builtin's ESM facade
//      are frozen when Node boots, so step 1 alone is invisible to `import { globSync }`.
// `glob` is resolved lazily (at the first globSync call), from, in order: the directories in
// $MCPSUP_NODE20_SHIM_PATHS (':'-separated node_modules dirs or prefixes), the entry script's
// own location (process.argv[1] -> walks up to <prefix>/node_modules), and this file's location.
// Any node child process that inherits NODE_OPTIONS gets the shim too; it is inert until used.
'use strict';

const fs = require('node:fs');

if (typeof fs.globSync !== 'function') {
    const path = require('node:path');
    const Module = require('node:module');

    let globMod = null;
    const loadGlob = () => {
        if (globMod) return globMod;
        const bases = [];
        for (const p of (process.env.MCPSUP_NODE20_SHIM_PATHS || '').split(':')) {
            if (p) bases.push(path.join(p, 'x.js'), path.join(p, 'node_modules', 'x.js'));
        }
        if (process.argv[1]) bases.push(path.resolve(process.argv[1]));
        bases.push(__filename);
        for (const base of bases) {
            try {
                globMod = Module.createRequire(base)('glob');
                return globMod;
            } catch (_) { /* next */ }
        }
        throw new Error('node20-shim: fs.globSync needs the npm package "glob"; not found from '
            + bases.join(', ') + ' (set MCPSUP_NODE20_SHIM_PATHS or run .ci/install-deps)');
    };

    // Node 22 semantics: globSync(pattern | pattern[], { cwd, exclude, withFileTypes }) -> string[]
    // of paths relative to cwd (or Dirent-like objects with withFileTypes).
    const globSync = function globSync(pattern, options) {
        const opts = options || {};
        const g = { cwd: opts.cwd ? String(opts.cwd) : process.cwd(), dot: true };
        if (opts.withFileTypes) g.withFileTypes = true;
        if (Array.isArray(opts.exclude)) g.ignore = opts.exclude;
        else if (typeof opts.exclude === 'function') {
            g.ignore = { ignored: (p) => opts.exclude(opts.withFileTypes ? p : p.relative()) };
        }
        return loadGlob().globSync(pattern, g);
    };
    Object.defineProperty(fs, 'globSync', {
        value: globSync, writable: true, configurable: true, enumerable: true,
    });

    if (typeof Module.register === 'function') {
        const { pathToFileURL } = require('node:url');
        // The facade imports the real builtin through this URL, which the hook lets through.
        const FACADE = 'node20-shim:fs';
        const hooks = `
            export async function resolve(specifier, context, next) {
                if ((specifier === 'fs' || specifier === 'node:fs')
                        && context.parentURL !== ${JSON.stringify(FACADE)}) {
                    return { url: ${JSON.stringify(FACADE)}, shortCircuit: true };
                }
                return next(specifier, context);
            }
            export async function load(url, context, next) {
                if (url === ${JSON.stringify(FACADE)}) {
                    return {
                        format: 'module',
                        shortCircuit: true,
                        source: "import fs from 'node:fs';\\n"
                            + "export * from 'node:fs';\\n"
                            + "export default fs;\\n"
                            + "export const globSync = fs.globSync;\\n",
                    };
                }
                return next(url, context);
            }`;
        Module.register('data:text/javascript,' + encodeURIComponent(hooks),
            pathToFileURL(__filename));
    }
}
