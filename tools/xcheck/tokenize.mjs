// SPDX-License-Identifier: MIT
//
// The llama.cpp side of `make xcheck`'s tokenizer check: the token ids of a
// text file, BOS first when the model asks for one (what llama.cpp feeds a
// text prompt), in the form `kvt-run --tokenize` prints.
//
//   node tokenize.mjs MODEL TEXT
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [modelPath, textPath] = process.argv.slice(2);
if (!textPath) {
    console.error("usage: node tokenize.mjs MODEL TEXT");
    process.exit(2);
}
const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
    maxThreads: 1, logLevel: LlamaLogLevel.warn, progressLogs: false,
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const ids = Array.from(model.tokenize(fs.readFileSync(textPath, "utf8")));
if (model.tokens.shouldPrependBosToken && model.tokens.bos != null)
    ids.unshift(model.tokens.bos);
console.log(ids.join(" "));
await model.dispose();
await llama.dispose();
