// The sinkscope command line: one file per verb (cli/cmd_<verb>.cpp), each registering its
// subcommand here. The CLI only parses flags and calls the libraries.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>

#include "kernels/parallel.h"

namespace ss::cli {

// Each verb adds its subcommand and a callback that does the work. Errors are thrown as ss::Error
// and reported by main() as one line on stderr with exit code 1.
void RegisterInspect(CLI::App& app);
void RegisterGenerate(CLI::App& app);
void RegisterPpl(CLI::App& app);
void RegisterTokenize(CLI::App& app);
void RegisterConvert(CLI::App& app);
void RegisterTrain(CLI::App& app);
void RegisterAnalyze(CLI::App& app);
void RegisterStream(CLI::App& app);
void RegisterChat(CLI::App& app);
void RegisterTrace(CLI::App& app);
void RegisterExplain(CLI::App& app);

// The GOMP_SPINCOUNT for a verb: kDecodeSpinCount for the verbs that decode a token at a time
// (generate, chat, stream, serve), kSpinCount for every other verb (src/app/main.cpp says why).
inline const char* SpinCountFor(std::string_view verb) {
  return verb == "generate" || verb == "chat" || verb == "stream" || verb == "serve"
             ? kDecodeSpinCount
             : kSpinCount;
}

// Logs go to stderr so that stdout holds only the command's output.
void Log(const std::string& line);

}  // namespace ss::cli
