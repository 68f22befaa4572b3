#include <cstdio>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.h"
#include "common/error.h"
#include "kernels/parallel.h"

namespace ss::cli {

void Log(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }
bool StderrIsTerminal() { return isatty(fileno(stderr)); }

}  // namespace ss::cli

int main(int argc, char** argv) {
  CLI::App app{"sinkscope: find, explain and exploit attention sinks in transformer language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] {
    const ss::BlasInfo blas = ss::GetBlasInfo();
    return fmt::format("sinkscope 0.1.0\nBLAS: {} ({}; {}; core {})\nthreads: {}", blas.config,
                       blas.openmp() ? "OpenMP" : "not OpenMP", blas.library, blas.core,
                       ss::ThreadCount());
  });
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
  // --threads on every verb (train declares its own, stored in its config): one OpenMP pool for
  // our kernels and OpenBLAS, sized before the verb runs.
  for (CLI::App* verb : app.get_subcommands([](CLI::App*) { return true; })) {
    if (verb->get_option_no_throw("--threads")) continue;
    verb->add_option_function<int>(
            "--threads", [](int n) { ss::SetThreadCount(n); },
            "Threads for the whole process (default: the cores available)")
        ->check(CLI::Range(1, 4096));
  }
  if (std::string warning = ss::BlasWarning(); !warning.empty())
    std::fprintf(stderr, "sinkscope: %s\n", warning.c_str());
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
