// The build links OpenBLAS's OpenMP variant (CMakeLists.txt): with the pthread variant, OpenBLAS's
// own threads and OpenMP's fight for the cores. These tests fail if any binary loads another one.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "kernels/dequant.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_ggml.h"
#include "kernels/parallel.h"
#include "test_util.h"

namespace ss {
namespace {

TEST(Blas, LoadedOpenBlasIsTheOpenMpBuild) {
  const BlasInfo info = GetBlasInfo();
  std::printf("BLAS: %s | core %s | parallel %d | %s\n", info.config.c_str(), info.core.c_str(),
              info.parallel, info.library.c_str());
  EXPECT_EQ(info.parallel, 2) << "openblas_get_parallel() must say OpenMP (2), not "
                              << (info.parallel == 1 ? "pthreads" : "sequential");
  EXPECT_NE(info.library.find("openblas-openmp"), std::string::npos) << info.library;
  EXPECT_EQ(BlasWarning(), "");
}

TEST(Blas, ThreadCountSetsOpenMpAndOpenBlasTogether) {
  const int before = ThreadCount();
  SetThreadCount(1);
  EXPECT_EQ(ThreadCount(), 1);
  EXPECT_EQ(openblas_get_num_threads(), 1);
  SetThreadCount(3);
  EXPECT_EQ(ThreadCount(), 3);
  EXPECT_EQ(openblas_get_num_threads(), 3);
  SetThreadCount(before);
}

TEST(Blas, CliBinaryLoadsTheOpenMpBuild) {
  test::CliResult r = test::RunCli("--version");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(OpenMP;"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("openblas-openmp"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  // The kernels it names are the ones this CPU runs (amx_bf16 / avx512_bf16 / avx2 / portable ...).
  EXPECT_NE(r.out.find(std::string("bf16 products: ") + Bf16KernelName() + ";"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(std::string("native (ggml) products: ") + GgmlKernelName(kGgmlTypeQ4_K)),
            std::string::npos)
      << r.out;
}

TEST(Blas, CliSpinsBrieflyUnlessTheUserChose) {
  test::CliResult r = test::RunCli("--version");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(std::string("wait policy: spin ") + kSpinCount + " then sleep"),
            std::string::npos)
      << r.out;
  // A policy the user set is kept.
  const std::string cmd = std::string("OMP_WAIT_POLICY=active ") + SINKSCOPE_BINARY_DIR +
                          "/src/cli/sinkscope --version";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0);
  EXPECT_NE(out.find("wait policy: active"), std::string::npos) << out;
}

// The verbs that decode a token at a time spin longer; the rest (and --version) briefly.
TEST(Blas, DecodeVerbsSpinLonger) {
  for (const char* verb : {"generate", "chat", "stream", "serve"})
    EXPECT_STREQ(cli::SpinCountFor(verb), kDecodeSpinCount) << verb;
  for (const char* verb : {"analyze", "explain", "trace", "train", "ppl", "inspect", "convert"})
    EXPECT_STREQ(cli::SpinCountFor(verb), kSpinCount) << verb;
  EXPECT_GT(std::stol(kDecodeSpinCount), 10 * std::stol(kSpinCount));
}

TEST(Blas, CliThreadsFlagIsCheckedOnEveryVerb) {
  for (const char* verb : {"inspect", "generate", "ppl", "analyze", "explain", "stream", "trace"}) {
    test::CliResult r = test::RunCli(std::string(verb) + " --threads 0 --model x");
    EXPECT_NE(r.code, 0) << verb;
    EXPECT_NE((r.out + r.err).find("--threads"), std::string::npos) << verb << ": " << r.err;
  }
  test::CliResult r = test::RunCli("inspect --threads 1 --model " +
                                   test::RepoPath("models/stories260K/stories260K.bin"));
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
}  // namespace ss
