// The output policy (common/file_util.h) and the run-directory and resume checks of `train`:
// devices, FIFOs and "-" are written in place, symlinks are followed, no output overwrites an
// input or another output, killed runs' temporaries are cleaned up, a run directory is not
// reused by accident, and a checkpoint whose state disagrees with its name is refused.
// docs/GUARANTEES.md names these tests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "common/error.h"
#include "common/file_util.h"
#include "test_util.h"

namespace ss {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::RunCli;

const std::string kModel = test::RepoPath("models/stories260K/stories260K.bin");
const std::string kPpl = "ppl --model " + kModel + " --prompt 'Once upon a time' ";

std::string FreshDir(const std::string& tag) {
  const std::string dir = test::TempDir("outputs_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool IsCharDevice(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

// The pid of a process that has exited (a child reaped at once), for "killed run" temporaries.
long DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

// Reads a FIFO to its end on a thread (opening it blocks until the writer opens it).
class FifoReader {
 public:
  explicit FifoReader(const std::string& path)
      : thread_([this, path] {
          std::ifstream in(path, std::ios::binary);
          text_.assign(std::istreambuf_iterator<char>(in), {});
        }) {}
  // Opens and closes the FIFO for writing first, so that the reader ends even when the writer
  // under test failed before opening it.
  std::string Join(const std::string& path) {
    const int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
    thread_.join();
    return text_;
  }

 private:
  std::string text_;
  std::thread thread_;
};

// --- Class 1a: devices, FIFOs and "-" are written in place, never replaced ----------------------

TEST(OutputPolicy, DevNullIsWrittenThroughAndStaysADevice) {
  WriteFileAtomic("/dev/null", "discarded\n");
  EXPECT_TRUE(IsCharDevice("/dev/null"));
  const CliResult r = RunCli(kPpl + "--json /dev/null");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(IsCharDevice("/dev/null"));
}

TEST(OutputPolicy, DevFullIsAnErrorAndStaysADevice) {
  if (!IsCharDevice("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const std::string err = ErrorOf([] { WriteFileAtomic("/dev/full", "x"); });
  EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
  const CliResult r = RunCli(kPpl + "--json /dev/full");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("sinkscope: error: /dev/full: write failed: No space left on device"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(IsCharDevice("/dev/full"));
}

TEST(OutputPolicy, FifoIsWrittenThroughAndStaysAFifo) {
  const std::string dir = FreshDir("fifo");
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  FifoReader reader(fifo);
  WriteFileAtomic(fifo, "hello through a pipe\n");
  EXPECT_EQ(reader.Join(fifo), "hello through a pipe\n");

  FifoReader cli_reader(fifo);
  const CliResult r = RunCli(kPpl + "--json " + fifo);
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string json = cli_reader.Join(fifo);
  EXPECT_NE(json.find("\"schema\": \"sinkscope.ppl/1\""), std::string::npos) << json;
  struct stat st {};
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path(), fifo) << "left behind";
}

TEST(OutputPolicy, DashIsStandardOutput) {
  CliResult r = RunCli(kPpl + "--json -");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"schema\": \"sinkscope.ppl/1\""), std::string::npos) << r.out;
  r = RunCli("convert --model " + kModel + " --to gguf --out -");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, 4), "GGUF");
  r = RunCli("convert --model " + kModel + " --to hf --out -");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--out -: a Hugging Face model is a directory"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists("-"));
}

// --- Class 1b: a symlink is followed; its target is replaced atomically -------------------------

TEST(OutputPolicy, SymlinkIsKeptAndItsTargetReplaced) {
  const std::string dir = FreshDir("symlink");
  fs::create_directories(dir + "/real");
  WriteFileAtomic(dir + "/real/report.json", "old\n");
  fs::create_symlink("real/report.json", dir + "/link.json");
  WriteFileAtomic(dir + "/link.json", "new\n");
  EXPECT_TRUE(fs::is_symlink(dir + "/link.json"));
  EXPECT_EQ(ReadFile(dir + "/real/report.json"), "new\n");

  const CliResult r = RunCli(kPpl + "--json " + dir + "/link.json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(dir + "/link.json"));
  EXPECT_NE(ReadFile(dir + "/real/report.json").find("sinkscope.ppl/1"), std::string::npos);
  // A dangling link names the file to create.
  fs::create_symlink("real/later.json", dir + "/dangling.json");
  WriteFileAtomic(dir + "/dangling.json", "created\n");
  EXPECT_TRUE(fs::is_symlink(dir + "/dangling.json"));
  EXPECT_EQ(ReadFile(dir + "/real/later.json"), "created\n");
  // No temporaries left beside the link or the target.
  for (const std::string& d : {dir, dir + "/real"})
    for (const auto& e : fs::directory_iterator(d))
      EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(OutputPolicy, DirectoryIsRefused) {
  const std::string dir = FreshDir("directory");
  EXPECT_NE(ErrorOf([&] { WriteFileAtomic(dir, "x"); }).find("is a directory"), std::string::npos);
  EXPECT_TRUE(fs::is_directory(dir));
}

TEST(OutputPolicy, UncommittedOutputLeavesTheTargetUntouched) {
  const std::string dir = FreshDir("uncommitted");
  WriteFileAtomic(dir + "/a.json", "old\n");
  {
    OutputFile out(dir + "/a.json");
    std::fputs("half", out.file());
    out.Close();
  }
  EXPECT_EQ(ReadFile(dir + "/a.json"), "old\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

// --- Class 1c: no output is one of the inputs or another output --------------------------------

TEST(OutputPolicy, CheckOutputsRefusesInputsAndDuplicates) {
  const std::string dir = FreshDir("check");
  WriteFileAtomic(dir + "/in.txt", "text\n");
  fs::create_directories(dir + "/sub");
  fs::create_symlink("in.txt", dir + "/alias.txt");
  std::string err = ErrorOf([&] {
    CheckOutputs({{"--json", dir + "/alias.txt"}}, {{"--text", dir + "/in.txt"}});
  });
  EXPECT_NE(err.find("is one of this command's inputs (--text"), std::string::npos) << err;
  err = ErrorOf([&] { CheckOutputs({{"--csv", dir + "/x"}, {"--json", dir + "/sub/../x"}}, {}); });
  EXPECT_NE(err.find("name the same file"), std::string::npos) << err;
  err = ErrorOf([&] { CheckOutputs({{"--csv", "-"}, {"--json", "-"}}, {}); });
  EXPECT_NE(err.find("name the same file"), std::string::npos) << err;
  // /dev/null keeps nothing: several outputs may discard into it.
  EXPECT_EQ(ErrorOf([] {
              CheckOutputs({{"--csv", "/dev/null"}, {"--json", "/dev/null"}}, {});
            }),
            "");
  EXPECT_EQ(ErrorOf([&] {
              CheckOutputs({{"--csv", dir + "/a"}, {"--json", dir + "/b"}, {"--html", ""}},
                           {{"--text", dir + "/in.txt"}});
            }),
            "");
  EXPECT_EQ(ReadFile(dir + "/in.txt"), "text\n");
}

TEST(OutputPolicy, CliRefusesAnOutputThatIsAnInput) {
  const std::string dir = FreshDir("cli_inputs");
  const std::string model = dir + "/model.bin";
  fs::copy_file(kModel, model);
  fs::copy_file(test::RepoPath("models/stories260K/tok512.bin"), dir + "/tok512.bin");
  const std::string bytes = ReadFile(model);
  auto expect_refused = [&](const std::string& args, const std::string& what) {
    const CliResult r = RunCli(args);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_NE(r.err.find("is one of this command's inputs (" + what), std::string::npos)
        << args << "\n"
        << r.err;
  };
  expect_refused("ppl --model " + model + " --prompt hi --json " + model, "--model");
  expect_refused("analyze --model " + model + " --samples 1 --json " + dir + "/tok512.bin",
                 "--model");
  EXPECT_EQ(ReadFile(model), bytes);
  // The files inside a Hugging Face directory.
  const std::string hf = dir + "/hf";
  CliResult r = RunCli("convert --model " + model + " --to hf --out " + hf);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string config = ReadFile(hf + "/config.json");
  expect_refused("ppl --model " + hf + " --prompt hi --json " + hf + "/config.json", "--model");
  expect_refused("explain --model " + hf + " --html " + hf + "/model.safetensors", "--model");
  expect_refused(
      "stream --model " + hf + " --text " + dir + "/tok512.bin --csv " + hf + "/tokenizer.json",
      "--model");
  EXPECT_EQ(ReadFile(hf + "/config.json"), config);
  // --text, --tokens and --tokenizer inputs.
  const std::string text = dir + "/story.txt";
  WriteFileAtomic(text, "Once upon a time there was a cat. The cat sat on the mat.\n");
  expect_refused("ppl --model " + model + " --text " + text + " --json " + text, "--text");
  expect_refused("stream --model " + model + " --text " + text + " --json " + text, "--text");
  const std::string ids = dir + "/ids.txt";
  WriteFileAtomic(ids, "1 2 3 4 5 6 7 8\n");
  expect_refused("analyze --model " + model + " --tokens " + ids + " --html " + ids, "--tokens");
  // A --tokenizer that also lies beside the model is named by its own flag.
  expect_refused("ppl --model " + model + " --tokenizer " + dir +
                     "/tok512.bin --prompt hi --json " + dir + "/tok512.bin",
                 "--tokenizer " + dir + "/tok512.bin");
  expect_refused("convert --model " + model + " --to gguf --out " + model, "--model");
  for (const char* force : {"", " --force"})
    expect_refused("convert --model " + model + " --tokenizer " + dir + "/tok512.bin --to gguf" +
                       force + " --out " + dir + "/tok512.bin",
                   "--tokenizer " + dir + "/tok512.bin");
  EXPECT_EQ(ReadFile(dir + "/tok512.bin"),
            ReadFile(test::RepoPath("models/stories260K/tok512.bin")));
  EXPECT_EQ(ReadFile(text), "Once upon a time there was a cat. The cat sat on the mat.\n");
  EXPECT_EQ(ReadFile(model), bytes);
}

// convert --out: an existing GGUF file is replaced only with --force (what it holds is kept
// otherwise), a Hugging Face directory never; standard output and devices are written through.
TEST(OutputPolicy, ConvertRefusesAnExistingOutputUnlessForced) {
  const std::string dir = FreshDir("convert_existing");
  const std::string gguf = dir + "/model.gguf";
  WriteFileAtomic(gguf, "not yet a model\n");
  CliResult r = RunCli("convert --model " + kModel + " --to gguf --out " + gguf);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("--out " + gguf + ": already exists; pass --force to replace it"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(ReadFile(gguf) == "not yet a model\n") << gguf << " was overwritten";
  // A symbolic link to an existing file is the same: its target exists.
  fs::create_symlink(gguf, dir + "/link.gguf");
  r = RunCli("convert --model " + kModel + " --to gguf --out " + dir + "/link.gguf");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  EXPECT_TRUE(ReadFile(gguf) == "not yet a model\n") << gguf << " was overwritten";
  r = RunCli("convert --model " + kModel + " --to gguf --force --out " + gguf);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(gguf).substr(0, 4), "GGUF");
  EXPECT_TRUE(fs::is_symlink(dir + "/link.gguf"));
  // A new path, standard output and /dev/null need no --force.
  r = RunCli("convert --model " + kModel + " --to gguf --out " + dir + "/new.gguf");
  EXPECT_EQ(r.code, 0) << r.err;
  r = RunCli("convert --model " + kModel + " --to gguf --out /dev/null");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(IsCharDevice("/dev/null"));
  // A directory is never replaced, --force or not.
  const std::string hf = dir + "/hf";
  fs::create_directories(hf);
  r = RunCli("convert --model " + kModel + " --to hf --force --out " + hf);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("--out " + hf + ": already exists; remove it or choose another path"),
            std::string::npos)
      << r.err;
}

TEST(OutputPolicy, CliRefusesTwoOutputsNamingOneFile) {
  const std::string dir = FreshDir("cli_dups");
  const std::string text = dir + "/story.txt";
  WriteFileAtomic(text, "Once upon a time there was a cat. The cat sat on the mat.\n");
  for (const std::string& args :
       {"stream --model " + kModel + " --text " + text + " --csv " + dir + "/x --json " + dir +
            "/x",
        "stream --model " + kModel + " --text " + text + " --csv " + dir + "/x --html " + dir +
            "/./x",
        "analyze --model " + kModel + " --samples 1 --json " + dir + "/r --html " + dir + "/r",
        "explain --model " + kModel + " --samples 1 --json - --html -"}) {
    const CliResult r = RunCli(args);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_NE(r.err.find("name the same file"), std::string::npos) << args << "\n" << r.err;
  }
  EXPECT_FALSE(fs::exists(dir + "/x"));
}

// --- Class 1d: temporaries of killed runs are cleaned up ----------------------------------------

TEST(OutputPolicy, StaleTemporariesAreRemoved) {
  const std::string dir = FreshDir("stale");
  const std::string dead = std::to_string(DeadPid());
  const std::string alive = std::to_string(getppid());  // a process that runs: left alone
  WriteFileAtomic(dir + "/r.json.tmp." + dead + ".keep", "not a temporary name\n");
  for (const std::string& name :
       {"r.json.tmp." + dead, "r.json.tmp." + alive, "other.json.tmp." + dead})
    std::ofstream(dir + "/" + name) << "partial";
  WriteFileAtomic(dir + "/r.json", "{}\n");
  EXPECT_FALSE(fs::exists(dir + "/r.json.tmp." + dead));
  EXPECT_TRUE(fs::exists(dir + "/r.json.tmp." + alive));
  EXPECT_TRUE(fs::exists(dir + "/other.json.tmp." + dead));  // another output's: not ours
  EXPECT_TRUE(fs::exists(dir + "/r.json.tmp." + dead + ".keep"));
  EXPECT_EQ(ReadFile(dir + "/r.json"), "{}\n");
  // Directory temporaries (converted models, checkpoints) too.
  fs::create_directories(dir + "/.step-4.tmp." + dead + "/inner");
  RemoveStaleTemporaries(dir, [](std::string_view stem) { return stem.rfind(".step-", 0) == 0; });
  EXPECT_FALSE(fs::exists(dir + "/.step-4.tmp." + dead));
  EXPECT_TRUE(fs::exists(dir + "/other.json.tmp." + dead));
}

// --- Class 1e: `train --out` does not reuse a run directory by accident -------------------------

const std::string kTrain = "train --preset quick --threads 1 --checkpoint-every 2 --eval-every 2 ";

TEST(TrainOutDir, NonEmptyRefusedUnlessOverwriteOrResume) {
  const std::string run = FreshDir("train_out") + "/run";
  CliResult r = RunCli(kTrain + "--steps 4 --out " + run);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string log = ReadFile(run + "/train_loss.tsv");
  const std::string state = ReadFile(run + "/step-4/trainer_state.json");

  r = RunCli(kTrain + "--steps 2 --out " + run);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--out " + run + ": is not empty"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--overwrite"), std::string::npos) << r.err;
  EXPECT_EQ(ReadFile(run + "/train_loss.tsv"), log);  // untouched
  EXPECT_EQ(ReadFile(run + "/step-4/trainer_state.json"), state);

  // --resume continues in place (a killed save left a temporary, which the next save removes).
  const std::string stale = run + "/.step-6.tmp." + std::to_string(DeadPid());
  fs::create_directories(stale);
  r = RunCli(kTrain + "--steps 6 --resume " + run);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(run + "/step-6/trainer_state.json"));
  EXPECT_FALSE(fs::exists(stale));

  // --overwrite starts over: the old checkpoints and log lines go, other files stay.
  WriteFileAtomic(run + "/notes.txt", "mine\n");
  r = RunCli(kTrain + "--steps 2 --overwrite --out " + run);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(run + "/step-2"));
  EXPECT_FALSE(fs::exists(run + "/step-4"));
  EXPECT_FALSE(fs::exists(run + "/step-6"));
  EXPECT_EQ(ReadFile(run + "/notes.txt"), "mine\n");
  const std::string new_log = ReadFile(run + "/train_loss.tsv");
  EXPECT_EQ(std::count(new_log.begin(), new_log.end(), '\n'), 3) << new_log;  // header + 2 steps

  r = RunCli(kTrain + "--steps 2 --overwrite --resume " + run);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--resume and --overwrite"), std::string::npos) << r.err;
}

// --- Class 5: resume integrity ------------------------------------------------------------------

TEST(TrainResume, StepDisagreeingWithDirectoryNameRefused) {
  const std::string run = FreshDir("resume_step") + "/run";
  CliResult r = RunCli(kTrain + "--steps 4 --out " + run);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string path = run + "/step-4/trainer_state.json";
  const std::string edited =
      std::regex_replace(ReadFile(path), std::regex("\"step\": 4"), "\"step\": 2");
  ASSERT_NE(edited, ReadFile(path));
  WriteFileAtomic(path, edited);
  const std::string before = ReadFile(run + "/step-4/model.safetensors");
  for (const std::string& from : {run, run + "/step-4", run + "/step-4/"}) {
    r = RunCli(kTrain + "--steps 6 --resume " + from);
    EXPECT_EQ(r.code, 1) << from;
    EXPECT_NE(r.err.find("trainer_state.json: step 2 disagrees with its directory name step-4"),
              std::string::npos)
        << from << "\n"
        << r.err;
  }
  EXPECT_EQ(ReadFile(run + "/step-4/model.safetensors"), before);
  EXPECT_FALSE(fs::exists(run + "/step-6"));
}

TEST(TrainResume, NoEvaluationIsReportedAsSuch) {
  const std::string run = FreshDir("no_eval") + "/run";
  const CliResult r = RunCli(
      "train --preset quick --threads 1 --steps 4 --eval-every 4 --checkpoint-every 4 "
      "--stop-after 1 --out " +
      run);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("no evaluation ran"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("val loss 0.0000"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("val_loss\tnone (no evaluation ran)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ss
