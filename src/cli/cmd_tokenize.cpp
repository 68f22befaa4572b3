// sinkscope tokenize: the token ids of a prompt, space-separated on stdout.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/options.h"
#include "common/file_util.h"
#include "io/gguf.h"

namespace ss::cli {

void RegisterTokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a prompt");
  struct Args {
    ModelOptions model;
    std::string prompt;
    bool no_bos = false;
  };
  auto a = std::make_shared<Args>();
  a->model.Add(cmd);
  InputFlags input;
  input.prompt = &a->prompt;
  input.prompt_note = "the text to tokenize";
  input.no_bos = &a->no_bos;
  AddInputOptions(cmd, input).prompt->required();
  cmd->callback([a] {
    std::unique_ptr<Tokenizer> tok;
    // A vocabulary-only GGUF (no tensors) is a tokenizer, not a model.
    if (FileExists(a->model.model_path) && !IsDirectory(a->model.model_path)) {
      const int fd = OpenRegularFile(a->model.model_path);  // a FIFO fails here, by name
      char magic[4] = {};
      bool gguf = read(fd, magic, 4) == 4 && std::string(magic, 4) == "GGUF";
      close(fd);
      if (gguf && a->model.tokenizer_path.empty()) {
        GgufFile file = GgufFile::Open(a->model.model_path);
        if (file.tensors().empty()) tok = LoadGgufTokenizer(file);
      }
    }
    if (!tok) tok = a->model.Load().tokenizer;
    std::vector<int> ids = tok->Encode(a->prompt, !a->no_bos);
    fmt::print("{}\n", fmt::join(ids, " "));
  });
}

}  // namespace ss::cli
