#include <cstdio>
#include <unistd.h>

#include "cli/commands.h"
#include "common/error.h"

namespace ss::cli {

void Log(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }
bool StderrIsTerminal() { return isatty(fileno(stderr)); }

}  // namespace ss::cli

int main(int argc, char** argv) {
  CLI::App app{"sinkscope: find, explain and exploit attention sinks in transformer language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sinkscope 0.1.0");
  ss::cli::RegisterInspect(app);
  ss::cli::RegisterGenerate(app);
  ss::cli::RegisterPpl(app);
  ss::cli::RegisterTokenize(app);
  ss::cli::RegisterConvert(app);
  ss::cli::RegisterTrain(app);
  ss::cli::RegisterAnalyze(app);
  ss::cli::RegisterStream(app);
  ss::cli::RegisterChat(app);
  ss::cli::RegisterTrace(app);
  ss::cli::RegisterExplain(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ss::Error& e) {
    std::fprintf(stderr, "sinkscope: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "sinkscope: error: out of memory\n");
    return 1;
  }
  return 0;
}
