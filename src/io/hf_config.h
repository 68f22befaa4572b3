// Hugging Face transformers config.json <-> ModelConfig, for the families sinkscope runs.
//
// config.json is one JSON object. The family comes from "architectures"[0] (a class name such as
// "LlamaForCausalLM") or, when that list is absent, from "model_type". Each family's keys, their
// transformers defaults and what it refuses live in its own file, model/arch_<family>.cpp, read
// through model/family.h's ConfigReader (the same code reads GGUF metadata); this file reads the
// keys every family shares (the RoPE settings, as rope_theta + rope_scaling or as transformers
// 5's rope_parameters, per layer type for Gemma 3; token ids, tie_word_embeddings, torch_dtype)
// and refuses what no family implements (a partial rotary factor below 1 outside GPT-NeoX and
// Phi-3, attention soft-capping outside Gemma, a RoPE type or key a family does not take).
// docs/ARCHITECTURES.md lists the families and the RoPE forms each accepts.
//
// ModelConfig::arch is the family's model_type.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace ss {

// Parses config.json text; `source` names the file in errors. Throws ss::Error naming the file and
// the field for malformed JSON, an unknown architecture / model_type (listing the supported ones),
// a missing required field, a field of the wrong type or out of range, or a setting sinkscope
// cannot run (e.g. rope_scaling type "longrope").
ModelConfig ParseHfConfig(std::string_view json_text, const std::string& source);
// Reads `path`: a config.json file, or a directory containing one.
ModelConfig ReadHfConfig(const std::string& path);

// The config.json text for `config` (a family in the registry, model/arch.h). Throws ss::Error if
// the config cannot be expressed in that family's config.json, naming the fields that would not
// read back the same (say, a "gpt2" config with RMSNorm), so ParseHfConfig(HfConfigJson(c)) == c
// always holds for what it returns.
std::string HfConfigJson(const ModelConfig& config);
// Writes HfConfigJson(config) to `path` atomically.
void WriteHfConfig(const std::string& path, const ModelConfig& config);

// The architectures[0] class names this file understands.
std::vector<std::string> SupportedHfArchitectures();

}  // namespace ss
