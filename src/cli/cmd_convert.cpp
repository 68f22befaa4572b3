// sinkscope convert --model PATH --to hf|gguf --out PATH
//                   [--type f32|f16|bf16|q8_0|q4_0|q4_k|q6_k|mxfp4] [--expert-type TYPE] [--force]
// Writes the model (any readable format) with its tokenizer as a Hugging Face directory
// (model.safetensors + config.json + tokenizer.json) or a GGUF v3 file with the tokenizer
// embedded. An existing --out is refused: a GGUF file is replaced only with --force, a directory
// never (remove it first). Both outputs appear atomically: the GGUF file through a temporary file
// and rename, the directory by writing a temporary directory beside --out and renaming it into
// place. The block types (q8_0, q4_0, q4_k, q6_k) apply to 2-D weights; AddGgufModel writes a
// weight whose rows are not whole blocks in another type, and the log names those weights. mxfp4
// writes the MoE expert weights in MXFP4 and the other weights in Q8_0 (llama.cpp's MXFP4_MOE).
// The stacked MoE experts are otherwise written F32, as llama.cpp's converters write them, unless
// --expert-type names their type (gguf: the same model's experts in Q8_0 or BF16, say, to compare
// with MXFP4).
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/file_util.h"
#include "io/model_files.h"
#include "kernels/dequant.h"
#include "tokenizer/export.h"

namespace ss::cli {
namespace {

namespace fs = std::filesystem;

struct ConvertOptions {
  ModelOptions model;
  std::string to;
  std::string out;
  std::string type = "f32";
  std::string expert_type;  // empty: F32 (MXFP4 with --type mxfp4)
  bool force = false;
};

void WriteHfDirectory(const LoadedModel& loaded, const std::string& out, SafetensorsDtype dtype) {
  if (PathExists(out, "--out"))
    Fail("--out {}: already exists; remove it or choose another path", out);
  const std::string tmp = TemporaryPath(out);
  const std::string name = fs::path(out).filename().string();
  RemoveStaleTemporaries(
      fs::path(out).has_parent_path() ? fs::path(out).parent_path().string() : ".",
      [&](std::string_view stem) { return stem == name; });
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec))
    Fail("--out {}: cannot create {}: {}", out, tmp, ec.message());
  try {
    WriteHfModel(loaded.model, tmp, dtype);
    WriteFileAtomic((fs::path(tmp) / "tokenizer.json").string(),
                    TokenizerJsonText(*loaded.tokenizer));
    fs::rename(tmp, out, ec);
    if (ec) Fail("--out {}: cannot rename {} into place: {}", out, tmp, ec.message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

// The weights written in another type than `ggml_type` because their rows are not whole blocks of
// it, for the log; empty if none. 1-D tensors stay F32 by design and are not listed.
std::string FallbackNote(const GgufWriter& writer, uint32_t ggml_type, uint32_t expert_type) {
  constexpr int kListed = 8;
  std::string names;
  int count = 0;
  for (const auto& [name, type] : writer.TensorTypes()) {
    if (type == ggml_type || type == kGgmlTypeF32) continue;
    if (ggml_type == kGgmlTypeMXFP4 && type == kGgmlTypeQ8_0)
      continue;  // the non-expert weights' type
    if (type == expert_type && name.find("_exps.") != std::string::npos) continue;  // --expert-type
    if (++count <= kListed)
      names += fmt::format("{}{} ({})", count > 1 ? ", " : "", name, GgmlTypeName(type));
  }
  if (count == 0) return "";
  if (count > kListed) names += fmt::format(", and {} more", count - kListed);
  return fmt::format(
      "{} weight(s) have rows that are not whole {}-value {} blocks and fell back: "
      "{}",
      count, GgmlBlockValues(ggml_type), GgmlTypeName(ggml_type), names);
}

void Run(const ConvertOptions& o) {
  if (o.to == "hf" && o.out == "-")
    Fail(
        "--out -: a Hugging Face model is a directory; give a path (--to gguf can go to "
        "standard output)");
  if (o.to == "hf" && (PathExists(o.out, "--out")))
    Fail("--out {}: already exists; remove it or choose another path{}", o.out,
         o.force ? " (--force replaces a GGUF file, never a directory)" : "");
  CheckOutputs({{"--out", o.out}},
               SampleInputs(o.model.model_path, "", "", o.model.tokenizer_path));
  // Standard output, a device or a FIFO is written through; an existing file only with --force.
  if (const OutputTarget t = ResolveOutput(o.out, "--out"); !t.in_place && t.exists && !o.force)
    Fail("--out {}: already exists; pass --force to replace it, or choose another path", o.out);
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  uint32_t ggml_type = kGgmlTypeF32, expert_type = kGgmlTypeF32;
  if (!o.expert_type.empty() && (o.to != "gguf" || o.type == "mxfp4"))
    Fail("--expert-type: only for --to gguf, and not with --type mxfp4 (whose experts are MXFP4)");
  if (o.to == "hf") {
    if (o.type == "f16")
      dtype = SafetensorsDtype::kF16;
    else if (o.type == "bf16")
      dtype = SafetensorsDtype::kBF16;
    else if (o.type != "f32")
      Fail(
          "--type {}: Hugging Face output supports f32, f16, bf16 (the quantised types are for "
          "--to gguf)",
          o.type);
  } else {
    if (o.type == "f16")
      ggml_type = kGgmlTypeF16;
    else if (o.type == "bf16")
      ggml_type = kGgmlTypeBF16;
    else if (o.type == "q8_0")
      ggml_type = kGgmlTypeQ8_0;
    else if (o.type == "q4_0")
      ggml_type = kGgmlTypeQ4_0;
    else if (o.type == "q4_k")
      ggml_type = kGgmlTypeQ4_K;
    else if (o.type == "q6_k")
      ggml_type = kGgmlTypeQ6_K;
    else if (o.type == "mxfp4")
      ggml_type = kGgmlTypeMXFP4;
    else if (o.type != "f32")
      Fail("--type {}: GGUF output supports f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, mxfp4", o.type);
    const std::map<std::string, uint32_t> experts = {
        {"f32", kGgmlTypeF32},   {"f16", kGgmlTypeF16},    {"bf16", kGgmlTypeBF16},
        {"q8_0", kGgmlTypeQ8_0}, {"q4_0", kGgmlTypeQ4_0},  {"q4_k", kGgmlTypeQ4_K},
        {"q6_k", kGgmlTypeQ6_K}, {"mxfp4", kGgmlTypeMXFP4}};
    if (!o.expert_type.empty()) expert_type = experts.at(o.expert_type);
  }
  // The writers read every weight as f32 (and encode it to --type).
  ModelOptions model = o.model;
  model.precision = "f32";
  model.precision_reason = "convert reads the weights in f32";
  LoadedModel loaded = model.Load();
  if (o.to == "hf") {
    WriteHfDirectory(loaded, o.out, dtype);
  } else {
    GgufWriter writer;
    AddGgufModel(loaded.model, writer, ggml_type, expert_type);
    AddGgufTokenizer(*loaded.tokenizer, writer);
    writer.Write(o.out);
    if (std::string note = FallbackNote(writer, ggml_type, expert_type); !note.empty()) Log(note);
  }
  Log(fmt::format("wrote {} ({} {}, {}{})", o.out, o.to == "hf" ? "Hugging Face" : "GGUF",
                  loaded.model.config.arch, o.type,
                  o.expert_type.empty() ? "" : ", experts " + o.expert_type));
}

}  // namespace

void RegisterConvert(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("convert", "Write a model as a Hugging Face directory or a GGUF file");
  auto o = std::make_shared<ConvertOptions>();
  o->model.Add(cmd);
  cmd->add_option("--to", o->to, "Output format")->required()->check(CLI::IsMember({"hf", "gguf"}));
  cmd->add_option("--out", o->out, "Output directory (hf) or file (gguf)")->required();
  cmd->add_option("--type", o->type,
                  "Tensor type: f32, f16, bf16, or (gguf only, for 2-D weights) q8_0, q4_0, q4_k, "
                  "q6_k; or (gguf only) mxfp4: MoE experts in MXFP4, other weights in q8_0")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "mxfp4"}));
  cmd->add_option("--expert-type", o->expert_type,
                  "gguf: the stacked MoE experts' type (default f32, as llama.cpp's converters; "
                  "mxfp4 with --type mxfp4)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "mxfp4"}));
  // Not the cache's --force (cli/options.cpp OwnMeanings).
  cmd->add_flag("--force", o->force,
                "Replace an existing --out GGUF file (a Hugging Face directory is never replaced)");
  cmd->callback([o] { Run(*o); });
}

}  // namespace ss::cli
