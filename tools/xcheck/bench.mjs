// SPDX-License-Identifier: MIT
//
// The llama.cpp side of tools/vs-llama: llama.cpp's speed on a GGUF file,
// run by its own CPU build (the prebuilt binaries of the npm package
// node-llama-cpp, as logits.mjs), measured the way kvt-run --json measures.
//
//   node bench.mjs MODEL [--prompt P] [--ids FILE] [--steps N] [--threads T]
//                  [--fa on|off] [--kv f16|f32|q8_0|q4_0] [--ctx C] [--batch B] [--seed S]
//   node bench.mjs --gen-ids P (--vocab V | MODEL) [--seed S]
//
// The prompt: the ids in FILE (whitespace-separated, fed as they are, no
// BOS), or P ids drawn uniformly from [3, n_vocab) by a fixed-seed PRNG
// (--gen-ids prints those same ids, for the other engine to read).
// Prefill: the whole prompt in batches of B tokens (B = --batch, default
// min(P, 512): node-llama-cpp makes llama.cpp's micro-batch (n_ubatch) the
// batch, and 512 is llama-bench's n_ubatch), the last id
// asking for the next token (greedy), as kvt-run's prefill ends on the
// logits of the last id. Decode: then N steps, each feeding the token the
// step before chose and choosing the next (greedy), with P tokens already in
// the KV: decode tokens/s = N / their time. Model load and context creation
// are not timed. --ctx: the context size (default P + N + 16).
//
// Prints one JSON object: "prefill":{tokens,seconds,tokens_per_s},
// "decode":{steps,ctx,seconds,tokens_per_s}, the settings, and what llama.cpp
// says of itself ("llama": release, build, the CPU backend library it loaded,
// its system info line).
import fs from "node:fs";
import { getLlama, LlamaLogLevel, readGgufFileInfo } from "node-llama-cpp";

const opt = { threads: "2", fa: "off", kv: "f16", steps: "0", seed: "1" };
const pos = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith("--")) {
        if (i + 1 >= argv.length) {
            console.error(`bench.mjs: ${argv[i]} needs a value`);
            process.exit(2);
        }
        opt[argv[i].slice(2)] = argv[++i];
    } else {
        pos.push(argv[i]);
    }
}

// mulberry32: small, seeded, the same ids on every machine.
function randomIds(n, vocab, seed) {
    let a = seed >>> 0;
    const ids = new Array(n);
    for (let i = 0; i < n; i++) {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        const r = ((t ^ (t >>> 14)) >>> 0) / 4294967296;
        ids[i] = 3 + Math.floor(r * (vocab - 3));
    }
    return ids;
}

if (opt["gen-ids"] !== undefined) {
    const n = parseInt(opt["gen-ids"], 10);
    let vocab = parseInt(opt.vocab, 10);
    if (opt.vocab === undefined && pos.length === 1) {
        const info = await readGgufFileInfo(pos[0], { readTensorInfo: false });
        vocab = info.metadata.tokenizer?.ggml?.tokens?.length;
    }
    if (!(n > 0) || !(vocab > 3)) {
        console.error("usage: node bench.mjs --gen-ids P (--vocab V | MODEL) [--seed S]");
        process.exit(2);
    }
    process.stdout.write(randomIds(n, vocab, Number(opt.seed)).join(" ") + "\n");
    process.exit(0);
}
if (pos.length !== 1 || (opt.prompt === undefined && opt.ids === undefined) ||
    !["on", "off"].includes(opt.fa)) {
    console.error("usage: node bench.mjs MODEL [--prompt P | --ids FILE] [--steps N] [--threads T]\n" +
                  "                      [--fa on|off] [--kv f16|f32|q8_0|q4_0] [--ctx C] [--batch B] [--seed S]\n" +
                  "       node bench.mjs --gen-ids P (--vocab V | MODEL) [--seed S]");
    process.exit(2);
}
const modelPath = pos[0];
const threads = Number(opt.threads), steps = Number(opt.steps);
const fa = opt.fa === "on";
const kv = opt.kv.toUpperCase();

const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
    maxThreads: threads, logLevel: LlamaLogLevel.warn, progressLogs: false,
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const nVocab = model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length;
const ids = opt.ids !== undefined
    ? fs.readFileSync(opt.ids, "utf8").trim().split(/\s+/).map(Number)
    : randomIds(Number(opt.prompt), nVocab, Number(opt.seed));
const P = ids.length;
const batch = opt.batch !== undefined ? Number(opt.batch) : Math.min(P, 512);
const ctxSize = opt.ctx !== undefined ? Number(opt.ctx) : P + steps + 16;
const context = await model.createContext({
    contextSize: ctxSize, batchSize: batch, sequences: 1,
    threads: { ideal: threads, min: threads }, flashAttention: fa,
    experimentalKvCacheKeyType: kv, experimentalKvCacheValueType: kv,
    ignoreMemorySafetyChecks: true, failedCreationRemedy: false,
});
if (context.flashAttention !== fa)
    throw new Error(`asked flash attention ${fa}, the context has ${context.flashAttention}`);
const seq = context.getSequence();
const next = { token: true, options: { temperature: 0 } };

// The CPU backend ggml chose (it loads the best libggml-cpu-*.so the CPU runs).
let variant = null;
try {
    const m = fs.readFileSync("/proc/self/maps", "utf8").match(/libggml-cpu-([\w.-]+?)\.so/);
    if (m)
        variant = m[1];
} catch { /* not Linux */ }

let t0 = performance.now();
let res = await seq.controlledEvaluate(ids.map((t, i) => (i === P - 1 ? [t, { generateNext: next }] : t)));
const tPrefill = (performance.now() - t0) / 1e3;
let tok = res[P - 1].next.token;

t0 = performance.now();
for (let s = 0; s < steps; s++) {
    res = await seq.controlledEvaluate([[tok, { generateNext: next }]]);
    tok = res[0].next.token;
}
const tDecode = (performance.now() - t0) / 1e3;

const out = {
    engine: "llama.cpp", model: modelPath, threads, flash_attn: fa, kv: opt.kv,
    n_ctx: context.contextSize, batch: context.batchSize,
    prefill: { tokens: P, seconds: +tPrefill.toFixed(6), tokens_per_s: +(P / tPrefill).toFixed(3) },
    decode: {
        steps, ctx: P, seconds: +tDecode.toFixed(6),
        tokens_per_s: steps ? +(steps / tDecode).toFixed(3) : 0,
    },
    llama: {
        release: llama.llamaCppRelease.release, repo: llama.llamaCppRelease.repo,
        build: llama.buildType, gpu: llama.gpu, cpu_variant: variant,
        system_info: llama.systemInfo.trim(),
    },
};
console.log(JSON.stringify(out));
await context.dispose();
await model.dispose();
await llama.dispose();
