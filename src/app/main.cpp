// The sinkscope executable: every verb of src/cli and `serve` (src/serve, which builds on the
// verbs), above both, so that neither library depends on the other's registration.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "cli/options.h"
#include "common/error.h"
#include "kernels/dequant.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_ggml.h"
#include "kernels/gemm_q8.h"
#include "kernels/parallel.h"
#include "kernels/vecmath.h"
#include "serve/serve.h"

// OpenMP threads spin briefly, then sleep, between parallel regions unless the user chose a policy
// (GOMP_SPINCOUNT=10000, tens of microseconds). libgomp's default spins 30 times longer: spinning
// threads waste a core whenever they wait, and on a busy machine they steal time from the thread
// doing the work (measured with load 9 on 2 cores: analyze used 1.95 CPU-s spinning against 1.12
// passive for the same 1.06 CPU-s of work). Sleeping at once (OMP_WAIT_POLICY=passive, what this
// did before) makes every region of a decode step pay a futex wake-up: greedy decode of a
// stories110M-shaped model in bf16 on 2 threads ran at 57 tokens/s passive, 87 with the short
// spin (bench/run_decode_bench.sh). The verbs that decode a token at a time (generate, chat,
// stream, serve) spin longer (ss::kDecodeSpinCount): a token is dozens of short parallel regions
// with a little serial work between them, and the short spin still cost a 2-thread f32 decode of
// the stories110M shape 15 % (49.5 against 57.0 tokens/s, 10 alternating runs); the helper
// then sleeps within milliseconds of the last region, so an idle chat does not hold a core.
// libgomp reads these once, before main, so the process re-executes itself once with the
// variable set.
// OpenBLAS likewise chooses its kernels once, when it loads: where it does not know the CPU and
// fell back to its SSE3 kernels, the same re-execution sets OPENBLAS_CORETYPE
// (ss::BlasCoreOverride says when and why).
static void ChooseRuntime(int argc, char** argv) {
  bool again = false;
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    const char* spin = ss::kSpinCount;
    for (int i = 1; i < argc; ++i) {
      if (argv[i][0] == '-') continue;  // the verb is the first word that is not an option
      spin = ss::cli::SpinCountFor(argv[i]);
      break;
    }
    again = setenv("GOMP_SPINCOUNT", spin, 1) == 0;
  }
  if (const char* core = ss::BlasCoreOverride())
    again = setenv("OPENBLAS_CORETYPE", core, 1) == 0 || again;
  if (again) execv("/proc/self/exe", argv);
  // If the re-exec fails we simply go on with the defaults.
}

int main(int argc, char** argv) {
  ChooseRuntime(argc, argv);
  CLI::App app{
      "sinkscope: find, explain and exploit attention sinks in transformer language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] {
    const ss::BlasInfo blas = ss::GetBlasInfo();
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    return fmt::format(
        "sinkscope 0.1.0\nBLAS: {} ({}; {}; core {})\nthreads: {} (OpenMP wait "
        "policy: {})\nSIMD: {}; bf16 products: {}; q8_0 products: {}; native (ggml) products: {}",
        blas.config, blas.openmp() ? "OpenMP" : "not OpenMP", blas.library, blas.core,
        ss::ThreadCount(),
        policy ? std::string(policy)
        : spin ? fmt::format("spin {} then sleep (GOMP_SPINCOUNT)", spin)
               : std::string("libgomp default"),
        ss::SimdLevelName(ss::ActiveSimdLevel()), ss::Bf16KernelName(), ss::Q8KernelName(),
        ss::GgmlKernelName(ss::kGgmlTypeQ4_K));
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
  ss::serve::RegisterServe(app);
  ss::cli::AddRuntimeOptions(app);  // --threads (cli/options.h)
  ss::cli::RequireWellFormedValues(app);
  if (std::string warning = ss::BlasWarning(); !warning.empty())
    std::fprintf(stderr, "sinkscope: %s\n", warning.c_str());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print their text; every other parse error is one line, as the verbs'
    // own errors are, with the usage convention's exit status 2.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "sinkscope: error: %s (see --help)\n", ss::Printable(e.what()).c_str());
    return 2;
  } catch (const ss::Error& e) {
    std::fprintf(stderr, "sinkscope: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "sinkscope: error: out of memory\n");
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the verb did not check itself (each verb names its flag where it does): the
    // library's message names the path and the operating system's reason.
    std::fprintf(stderr, "sinkscope: error: %s\n", ss::Printable(e.what()).c_str());
    return 1;
  }
  return 0;
}
