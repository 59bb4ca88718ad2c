// SPDX-License-Identifier: MIT
//
// The llama.cpp side of `make xcheck`: the same greedy decode as
// `kvt-run --prompt-ids IDS -n N --temp 0 --dump-logits OUT`, run by
// llama.cpp's own CPU build (the prebuilt binaries of the npm package
// node-llama-cpp), writing the same rows.
//
//   node logits.mjs MODEL IDS N OUT [--kv f16|f32|q8_0|q4_0] [--threads T] [--ctx C]
//
// IDS: whitespace-separated token ids, fed as they are (no BOS added).
// OUT: N rows of n_vocab little-endian float32: row 0 the logits after the
// last prompt id, row i those after the i-th generated token. Prints the
// generated ids on stdout as "ids: ...". Flash attention is off (its CPU
// path rounds to f16 even with f32 KV); the KV type is set explicitly.
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const opt = { kv: "f16", threads: "1", ctx: "512" };
const pos = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith("--"))
        opt[argv[i].slice(2)] = argv[++i];
    else
        pos.push(argv[i]);
}
if (pos.length !== 4) {
    console.error("usage: node logits.mjs MODEL IDS N OUT [--kv f16|f32|q8_0|q4_0] [--threads T] [--ctx C]");
    process.exit(2);
}
const [modelPath, idsPath, nStr, outPath] = pos;
const n = parseInt(nStr, 10);
const ids = fs.readFileSync(idsPath, "utf8").trim().split(/\s+/).map(Number);
const threads = Number(opt.threads);

const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
    maxThreads: threads, logLevel: LlamaLogLevel.warn, progressLogs: false,
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const nVocab = model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length;
const kv = opt.kv.toUpperCase();
const context = await model.createContext({
    contextSize: Number(opt.ctx), batchSize: Math.max(512, ids.length + 1),
    // Flash attention off (its CPU path rounds to f16 even with f32 KV),
    // but llama.cpp needs it for a quantized V.
    threads: { ideal: threads, min: threads }, flashAttention: kv === "Q8_0" || kv === "Q4_0",
    experimentalKvCacheKeyType: kv, experimentalKvCacheValueType: kv,
});
const seq = context.getSequence();
const next = { token: true, logits: true, options: { temperature: 0 } };
const out = Buffer.alloc(n * nVocab * 4);
const toks = [];
let input = ids.map((t, i) => (i === ids.length - 1 ? [t, { generateNext: next }] : t));

for (let step = 0; step < n; step++) {
    const res = await seq.controlledEvaluate(input);
    const r = res[input.length - 1].next;
    if (r.logits.size !== nVocab)
        throw new Error(`step ${step}: ${r.logits.size} logits, n_vocab ${nVocab}`);
    for (const [t, v] of r.logits)
        out.writeFloatLE(v, (step * nVocab + t) * 4);
    toks.push(r.token);
    input = [[r.token, { generateNext: next }]];
}
fs.writeFileSync(outPath, out);
console.log("ids: " + toks.join(" "));
await context.dispose();
await model.dispose();
await llama.dispose();
