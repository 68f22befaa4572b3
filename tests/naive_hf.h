// An independent reference forward pass for the Hugging Face families, written from the
// transformers modeling files' semantics (not from sinkscope's model/ code): it reads the HF-named
// tensors exactly as they are stored (GPT-2 Conv1D (in, out), GPT-NeoX's per-head fused
// query_key_value, rotate-half RoPE), recomputes the whole sequence with plain double-precision
// loops and uses none of the shared kernels. Tests hold LoadModel + the family forward to it.
#pragma once

#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "tensor/tensor.h"

namespace ss::test {

using HfTensors = std::map<std::string, Tensor>;

// Logits (T * V) of `tokens` at positions 0..T-1.
std::vector<float> NaiveHfForward(const ModelConfig& config, const HfTensors& weights,
                                  const std::vector<int>& tokens);

// Qwen3-Next / Qwen3.5 / Qwen3.5-MoE (tests/naive_qwen35.cpp): the reference and random weights
// for these families, which NaiveHfForward and RandomHfWeights hand them to.
bool IsQwen35Family(const std::string& arch);
std::vector<float> NaiveQwen35Forward(const ModelConfig& config, const HfTensors& weights,
                                      const std::vector<int>& tokens);
HfTensors RandomQwen35Weights(const ModelConfig& config, uint32_t seed);

// Random weights in the family's Hugging Face layout and names for `config` (std 0.2; norm
// weights near 1).
HfTensors RandomHfWeights(const ModelConfig& config, uint32_t seed);

// A random model of `config_json`'s family: RandomHfWeights (then `edit`, if given), written as an
// HF directory under a temporary `name` and loaded back with LoadModel.
// A small gpt_oss config.json: 2 layers (sliding window 8, then global), 4 heads over 2 kv heads
// of 8, width 32, 3 experts top-2, context 128.
std::string SmallGptOssConfig(int vocab_size = 61);
// An edit for WriteRandomHf / LoadRandomHf: every head's learned sink logit set to `value`.
std::function<void(HfTensors&)> SetSinkLogits(float value);

std::string WriteRandomHf(const std::string& config_json, uint32_t seed, const std::string& name,
                          const std::function<void(HfTensors&)>& edit = nullptr);  // the directory
Model LoadRandomHf(const std::string& config_json, uint32_t seed, const std::string& name,
                   const std::function<void(HfTensors&)>& edit = nullptr);

}  // namespace ss::test
