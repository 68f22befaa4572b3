#!/usr/bin/env bash
# llama.cpp reads the Qwen3.5 GGUFs `sinkscope convert` writes as sinkscope does: random Qwen3.5
# (qwen35: 2 key and 4 value heads, so the tiled value-head order matters) and Qwen3.6-shaped MoE
# (qwen35moe: 16 / 32 heads, 8 experts and the shared expert) models of 4 layers, made by
# scripts/make_test_model.py, their embedding, head and output projections scaled
# (bench/scale_safetensors.py) so that their predictions are far from uniform, written as F32,
# Q8_0 and Q4_K GGUF; then llama.cpp's llama-perplexity (8 chunks of 128 tokens) beside the same
# statistic from sinkscope's forward (bench/llamacpp_ppl_chunks.py).
# LLAMACPP_DIR: a llama.cpp build whose bin/ holds llama-perplexity (../shared/tools/peers/llamacpp
# builds one); without it the script says so and exits 0.
# Usage: bench/run_llamacpp_qwen35_check.sh [build dir]
set -euo pipefail
BUILD=${1:-build}
LLAMACPP_DIR=${LLAMACPP_DIR:-/tmp/llama.cpp-peer/build}
WORK=${WORK:-/tmp/sinkscope_llamacpp_qwen35}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -x "$LLAMACPP_DIR/bin/llama-perplexity" ]; then
  echo "llama-perplexity not found in $LLAMACPP_DIR/bin (set LLAMACPP_DIR): nothing to compare"
  exit 0
fi
ninja -C "$BUILD" sinkscope _sinkscope >/dev/null
SS=$(realpath "$BUILD/src/cli/sinkscope")
TOK=$here/models/stories260K/tok512.bin
mkdir -p "$WORK"
head -c 20000 "$here/data/default_text.txt" > "$WORK/text.txt"
rm -rf "$WORK/qwen35" "$WORK/qwen35moe"
/usr/bin/python3 "$here/scripts/make_test_model.py" --preset qwen3.5-tiny --out "$WORK/qwen35" >/dev/null
/usr/bin/python3 "$here/scripts/make_test_model.py" --preset qwen3.6-35b-a3b --layers 4 --dim 64 \
  --heads 4 --kv-heads 2 --head-dim 16 --ffn 32 --experts 8 --top-k 2 --vocab 512 \
  --out "$WORK/qwen35moe" >/dev/null
echo "llama.cpp: $LLAMACPP_DIR; $(date -u +%Y-%m-%dT%H:%MZ)"
for m in qwen35 qwen35moe; do
  /usr/bin/python3 "$here/bench/scale_safetensors.py" "$WORK/$m/model.safetensors"
  for t in f32 q8_0 q4_k; do
    "$SS" convert --model "$WORK/$m" --tokenizer "$TOK" --to gguf --type "$t" \
      --out "$WORK/$m-$t.gguf" --force >/dev/null 2>&1
    echo "== $m $t"
    "$LLAMACPP_DIR/bin/llama-perplexity" -m "$WORK/$m-$t.gguf" -f "$WORK/text.txt" -c 128 -b 128 \
      --chunks 8 -t 2 2>&1 | grep -E '^\[' | sed 's/^/llama.cpp  /'
    PYTHONPATH=$BUILD/python /usr/bin/python3 "$here/bench/llamacpp_ppl_chunks.py" \
      "$WORK/$m-$t.gguf" "$WORK/text.txt" 128 8 | sed 's/^/sinkscope  /'
  done
done
