// Rewrites a GGUF file whose tensors are F32 (sinkscope convert --type f32) with its matrices in
// another ggml type: every 2-D tensor whose rows are whole blocks of TYPE (32 values for Q8_0,
// Q4_0 and MXFP4, 256 for Q4_K and Q6_K, any for F16 and BF16) is written as TYPE, the rest (the
// norms; rows that are not whole blocks) stays F32, and the metadata is copied as it is.
// bench/run_decode_bench.sh uses it for a dense model in MXFP4, which `convert` does not write
// (its --type mxfp4 is llama.cpp's MXFP4_MOE: MoE experts in MXFP4, dense weights in Q8_0).
// Usage: gguf_retype IN.gguf OUT.gguf f16|bf16|q8_0|q4_0|q4_k|q6_k|mxfp4
#include <cstdio>
#include <cstring>
#include <string>
#include <variant>

#include "common/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "kernels/dequant.h"

namespace {

uint32_t TypeNamed(const std::string& name) {
  const std::pair<const char*, uint32_t> types[] = {
      {"f16", ss::kGgmlTypeF16},    {"bf16", ss::kGgmlTypeBF16}, {"q8_0", ss::kGgmlTypeQ8_0},
      {"q4_0", ss::kGgmlTypeQ4_0},  {"q4_k", ss::kGgmlTypeQ4_K}, {"q6_k", ss::kGgmlTypeQ6_K},
      {"mxfp4", ss::kGgmlTypeMXFP4}};
  for (auto [n, t] : types)
    if (name == n) return t;
  ss::Fail("type {}: expected f16, bf16, q8_0, q4_0, q4_k, q6_k or mxfp4", name);
}

void CopyValue(const std::string& key, const ss::GgufValue& v, ss::GgufWriter& w) {
  using ss::GgufType;
  switch (v.type) {
    case GgufType::kString:
      w.SetString(key, std::get<std::string>(v.value));
      return;
    case GgufType::kUint32:
      w.SetU32(key, static_cast<uint32_t>(std::get<uint64_t>(v.value)));
      return;
    case GgufType::kInt32:
      w.SetI32(key, static_cast<int32_t>(std::get<int64_t>(v.value)));
      return;
    case GgufType::kFloat32:
      w.SetF32(key, static_cast<float>(std::get<double>(v.value)));
      return;
    case GgufType::kBool:
      w.SetBool(key, std::get<bool>(v.value));
      return;
    case GgufType::kArray:
      if (v.array_type == GgufType::kString) {
        w.SetStringArray(key, std::get<std::vector<std::string>>(v.value));
        return;
      }
      if (v.array_type == GgufType::kFloat32) {
        const auto& d = std::get<std::vector<double>>(v.value);
        w.SetF32Array(key, std::vector<float>(d.begin(), d.end()));
        return;
      }
      if (v.array_type == GgufType::kInt32) {
        const auto& i = std::get<std::vector<int64_t>>(v.value);
        w.SetI32Array(key, std::vector<int32_t>(i.begin(), i.end()));
        return;
      }
      break;
    default:
      break;
  }
  ss::Fail("key {}: a value of type {} (array of {}), which this tool does not copy", key,
           ss::GgufTypeName(v.type), ss::GgufTypeName(v.array_type));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 4)
      ss::Fail("usage: gguf_retype IN.gguf OUT.gguf f16|bf16|q8_0|q4_0|q4_k|q6_k|mxfp4");
    const uint32_t type = TypeNamed(argv[3]);
    const ss::GgufFile in = ss::GgufFile::Open(argv[1]);
    ss::GgufWriter out;
    for (const std::string& key : in.keys())
      if (key != "general.alignment") CopyValue(key, *in.Find(key), out);
    const int64_t block = ss::GgmlBlockValues(type);
    int converted = 0;
    for (const ss::GgufTensorInfo& t : in.tensors()) {
      if (t.type != ss::kGgmlTypeF32)
        ss::Fail("{}: tensor {} is {}, not F32", argv[1], t.name, ss::GgmlTypeName(t.type));
      std::vector<int64_t> shape(t.shape.rbegin(), t.shape.rend());  // PyTorch order
      ss::Tensor tensor = ss::Tensor::Zeros(shape);
      std::memcpy(tensor.data(), t.data, static_cast<size_t>(t.numel()) * sizeof(float));
      const bool matrix = t.shape.size() == 2 && t.shape[0] % block == 0;
      out.AddTensor(t.name, tensor, matrix ? type : ss::kGgmlTypeF32);
      converted += matrix;
    }
    out.Write(argv[2]);
    std::printf("%s: %d of %zu tensors written as %s\n", argv[2], converted, in.tensors().size(),
                ss::GgmlTypeName(type));
    return 0;
  } catch (const ss::Error& e) {
    std::fprintf(stderr, "gguf_retype: error: %s\n", e.what());
    return 1;
  }
}
