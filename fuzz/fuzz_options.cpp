// Fuzzes the command line as main() builds it: every verb's flags (the option table and each
// verb's own), with RequireWellFormedValues, parsed from NUL-separated words, the verbs' work
// replaced by nothing. Whatever the words, parsing ends in a CLI11 parse error, an ss::Error from
// a flag's own parser, or a parse whose numbers are decimal text and whose values are not empty.
// Each word also goes to the value parsers of the KV-cache flags and --seed.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/options.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "serve/serve.h"
#include "stream/stream.h"

namespace {

// The verbs' callbacks own their flags' storage (shared_ptr captures): kept alive here while a
// no-op replaces them. A pointer to the protected member, named through a derived class, reads
// it from any App.
struct CallbackOf : CLI::App {
  static std::function<void()> Take(CLI::App* app) {
    constexpr std::function<void()> CLI::App::*member = &CallbackOf::final_callback_;
    return app->*member;
  }
};

CLI::App& App() {
  static CLI::App* app = [] {
    auto* a = new CLI::App("sinkscope");
    a->require_subcommand(1);
    using namespace ss::cli;
    for (auto reg : {RegisterInspect, RegisterGenerate, RegisterPpl, RegisterTokenize,
                     RegisterConvert, RegisterTrain, RegisterAnalyze, RegisterStream, RegisterChat,
                     RegisterTrace, RegisterExplain, ss::serve::RegisterServe})
      reg(*a);
    static std::vector<std::function<void()>> kept;
    for (CLI::App* verb : a->get_subcommands([](CLI::App*) { return true; })) {
      kept.push_back(CallbackOf::Take(verb));
      verb->callback([] {});  // parse only
    }
    RequireWellFormedValues(*a);
    return a;
  }();
  return *app;
}

void CheckParsed(CLI::App& app) {
  for (CLI::App* verb : app.get_subcommands())
    for (CLI::Option* opt : verb->get_options()) {
      const std::string full = opt->get_type_name();
      const std::string type = full.substr(0, full.find(':'));
      for (const std::string& value : opt->results()) {
        if (type == "INT" || type == "UINT" || type == "FLOAT") {
          if (!ss::cli::CheckDecimal(value, type != "FLOAT", type == "UINT").empty()) std::abort();
        } else if (type == "TEXT" && value.empty() && !opt->check_name("--prompt") &&
                   !opt->check_name("--identity")) {
          std::abort();
        }
      }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words;
  std::string word;
  for (size_t i = 0; i < size && words.size() < 64; ++i) {
    if (data[i] == 0) {
      words.push_back(word);
      word.clear();
    } else {
      word += static_cast<char>(data[i]);
    }
  }
  if (words.size() < 64) words.push_back(word);

  for (const std::string& w : words) {
    bool detected = false;
    try {
      (void)ss::cli::ParseKvConfigs(w, "--compare-kv");
    } catch (const ss::Error&) {
    }
    try {
      const std::vector<int64_t> keep = ss::stream::ParseKvKeep(w, "--kv-keep", &detected);
      if (static_cast<int64_t>(keep.size()) > ss::stream::kMaxKvKeep) std::abort();
    } catch (const ss::Error&) {
    }
    try {
      (void)ss::cli::ParseSeed("--seed", w);
    } catch (const ss::Error&) {
    }
  }

  CLI::App& app = App();
  app.clear();
  std::vector<const char*> argv = {"sinkscope"};
  // CLI11 takes argv back to front; the words in order as a user would type them.
  for (const std::string& w : words) argv.push_back(w.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
    CheckParsed(app);
  } catch (const CLI::ParseError&) {
  } catch (const ss::Error&) {
  }
  return 0;
}
