// attention=softmax, the default: P = softmax(q k^T / sqrt(Dh)) over the keys a query sees. Its
// row weights are the kernels' own (SoftmaxRule, kernels/attn_rule.cpp); it adds no tensor, no
// flag and no op.
#include "model/attention.h"

namespace ss {

std::span<const AttnVariant* const> AttnVariants_softmax() {
  static const AttnVariant softmax{.name = "softmax",
                                   .feature = nullptr,
                                   .flag = nullptr,
                                   .flag_name = nullptr,
                                   .key = {},
                                   .gguf_tensor = nullptr,
                                   .rule = SoftmaxRule};
  static const AttnVariant* const all[] = {&softmax};
  return all;
}

}  // namespace ss
