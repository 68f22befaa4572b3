// Random-weight Llama-family models for tests and benchmarks (timing and invariants need a model
// of a given shape, not a trained one).
#pragma once

#include <cstdint>

#include "model/weights.h"

namespace ss {

// Weights ~ N(0, scale^2) (scale = 1/sqrt(D) when <= 0), norm weights 1, classifier tied to the
// embedding when config.tied_embeddings. Deterministic for a given seed.
Model MakeRandomModel(const ModelConfig& config, uint64_t seed, float scale = 0.0f);

}  // namespace ss
