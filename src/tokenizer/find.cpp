#include "tokenizer/find.h"

#include <filesystem>

#include "common/error.h"
#include "common/file_util.h"
#include "io/gguf.h"

namespace ss {

static void CheckAgreement(const Model& model, const Tokenizer& tok, const std::string& path) {
  if (tok.vocab_size() > model.config.vocab_size)
    Fail("{}: tokenizer has {} tokens but model {} embeds only {}", path, tok.vocab_size(),
         model.source, model.config.vocab_size);
}

std::unique_ptr<Tokenizer> FindTokenizer(const Model& model, const std::string& explicit_path) {
  const int V = model.config.vocab_size;
  if (!explicit_path.empty()) {
    auto tok = LoadTokenizer(explicit_path, V);
    CheckAgreement(model, *tok, explicit_path);
    return tok;
  }
  namespace fs = std::filesystem;
  fs::path source(model.source);
  std::vector<fs::path> candidates;
  if (model.format == "gguf") {
    GgufFile gguf = GgufFile::Open(model.source);
    auto tok = LoadGgufTokenizer(gguf);
    CheckAgreement(model, *tok, model.source);
    return tok;
  }
  if (IsDirectory(model.source)) {
    candidates.push_back(source / "tokenizer.json");
  } else {
    fs::path dir = source.parent_path();
    candidates.push_back(dir / ("tok" + std::to_string(V) + ".bin"));
    candidates.push_back(dir / "tokenizer.bin");
    candidates.push_back(dir / "tok512.bin");
  }
  for (const auto& c : candidates) {
    if (!FileExists(c.string())) continue;
    auto tok = LoadTokenizer(c.string(), V);
    CheckAgreement(model, *tok, c.string());
    return tok;
  }
  std::string looked;
  for (const auto& c : candidates) looked += (looked.empty() ? "" : ", ") + c.string();
  Fail("{}: no tokenizer found beside the model (looked for {}); pass --tokenizer PATH",
       model.source, looked);
}

}  // namespace ss
