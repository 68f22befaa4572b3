// The command line's one option table (cli/options.h): every verb, as the executable registers it,
// takes each shared flag from the table (same names, help, default and heading), no two verbs
// declare the same flag name apart from the table, and generate, chat and stream have one
// default cache policy.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "serve/serve.h"
#include "stream/stream.h"

namespace ss::cli {
namespace {

// The executable's verbs (src/app/main.cpp registers the same).
struct Verbs {
  CLI::App app{"sinkscope"};
  Verbs() {
    RegisterInspect(app);
    RegisterGenerate(app);
    RegisterPpl(app);
    RegisterTokenize(app);
    RegisterConvert(app);
    RegisterTrain(app);
    RegisterAnalyze(app);
    RegisterStream(app);
    RegisterChat(app);
    RegisterTrace(app);
    RegisterExplain(app);
    serve::RegisterServe(app);
    AddRuntimeOptions(app);
  }
  std::vector<CLI::App*> all() {
    return app.get_subcommands([](CLI::App*) { return true; });
  }
  CLI::App* verb(const std::string& name) { return app.get_subcommand(name); }
};

std::vector<CLI::Option*> Flags(CLI::App* verb) {
  return verb->get_options([verb](const CLI::Option* o) { return o != verb->get_help_ptr(); });
}

// The names of a table entry, without the dashes: "--onset-threshold,--onset-rate" -> both.
std::vector<std::string> Names(const OptionSpec& spec) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start < spec.names.size()) {
    size_t comma = spec.names.find(',', start);
    if (comma == std::string::npos) comma = spec.names.size();
    names.push_back(spec.names.substr(start + 2, comma - start - 2));
    start = comma + 1;
  }
  return names;
}

// The table entry one of whose names the option has, or null.
const OptionSpec* EntryOf(const CLI::Option* option) {
  for (const OptionSpec& spec : OptionTable())
    for (const std::string& name : Names(spec))
      for (const std::string& lname : option->get_lnames())
        if (lname == name) return &spec;
  return nullptr;
}

bool OwnMeaningOf(const std::string& verb, const std::string& name) {
  for (const OwnMeaning& own : OwnMeanings())
    if (verb == own.verb && name == own.name) return true;
  return false;
}

TEST(Options, EveryVerbTakesTheTablesDefinition) {
  Verbs verbs;
  int checked = 0;
  for (CLI::App* verb : verbs.all()) {
    const std::string v = verb->get_name();
    for (const CLI::Option* option : Flags(verb)) {
      const OptionSpec* spec = EntryOf(option);
      if (!spec) continue;
      const std::string name = option->get_name();
      if (OwnMeaningOf(v, name)) continue;
      SCOPED_TRACE(v + " " + name);
      ++checked;
      // The same names (aliases included), so one flag is not two spellings apart.
      EXPECT_EQ(option->get_lnames(), Names(*spec));
      // The table's help, then at most the verb's note after "; ".
      const std::string help = option->get_description();
      const std::string base = OptionHelp(*spec, v);
      EXPECT_EQ(help.substr(0, base.size()), base);
      if (help.size() > base.size()) {
        EXPECT_EQ(help.substr(base.size(), 2), "; ") << help;
      }
      // The table's default where it has one; a verb's own default is shown where it sets one.
      if (!spec->verb_default) {
        EXPECT_EQ(option->get_default_str(), spec->default_text);
      }
      EXPECT_EQ(option->get_expected_max() == 0, spec->is_flag);  // a flag takes no value
      // Its group's heading (--seed takes the heading of the group it seeds).
      if (name != "--seed") {
        EXPECT_EQ(option->get_group(), OptionGroupName(spec->group));
      }
    }
  }
  EXPECT_GT(checked, 60);  // 12 verbs' worth of shared flags
}

TEST(Options, NoFlagNameIsDeclaredTwiceOutsideTheTable) {
  // Each flag name, by the verbs that declare it without the table; a name two verbs share must
  // be the table's (train's flags are its config's keys: their names are checked to be listed).
  Verbs verbs;
  std::map<std::string, std::set<std::string>> by_name;
  for (CLI::App* verb : verbs.all()) {
    const std::string v = verb->get_name();
    for (const CLI::Option* option : Flags(verb)) {
      const OptionSpec* spec = EntryOf(option);
      if (spec && !OwnMeaningOf(v, option->get_name())) continue;
      if (spec) {
        // A table name with its own meaning: listed, and its help is not the table's.
        EXPECT_NE(option->get_description().rfind(OptionHelp(*spec, v), 0), 0u)
            << v << " " << option->get_name() << " is the table's flag; drop it from OwnMeanings";
        continue;
      }
      if (v == "train") continue;
      by_name[option->get_name()].insert(v);
    }
  }
  for (const auto& [name, users] : by_name) {
    std::string list;
    for (const std::string& u : users) list += " " + u;
    EXPECT_EQ(users.size(), 1u) << name << " is declared by hand in" << list
                                << ": declare it once in cli/options.cpp's table";
  }
  // Every own meaning is real: the verb has the flag, and the name is the table's.
  for (const OwnMeaning& own : OwnMeanings()) {
    CLI::App* verb = verbs.verb(own.verb);
    ASSERT_NE(verb, nullptr) << own.verb;
    EXPECT_NE(verb->get_option_no_throw(own.name), nullptr) << own.verb << " " << own.name;
    EXPECT_NO_THROW(FindOption(own.name)) << own.name;
  }
}

TEST(Options, EveryTableEntryIsTakenByTwoVerbsOrGroupedWithOnesThatAre) {
  Verbs verbs;
  std::map<std::string, int> users;
  for (CLI::App* verb : verbs.all())
    for (const CLI::Option* option : Flags(verb))
      if (const OptionSpec* spec = EntryOf(option);
          spec && !OwnMeaningOf(verb->get_name(), option->get_name()))
        ++users[spec->names];
  for (const OptionSpec& spec : OptionTable()) {
    EXPECT_GE(users[spec.names], 1) << spec.names << " is in the table but no verb takes it";
    // --first-k is analyze's alone, declared with the sink metrics it belongs to.
    if (spec.names != "--first-k") {
      EXPECT_GE(users[spec.names], 2) << spec.names;
    }
  }
  EXPECT_EQ(users["--threads"], static_cast<int>(verbs.all().size()) - 1);  // all but train
}

TEST(Options, OneCachePolicyDefaultForGenerateChatAndStream) {
  Verbs verbs;
  const stream::StreamOptions library;  // what the Python module and serve start from
  EXPECT_EQ(FindOption("--policy").default_text, "sinks");
  EXPECT_EQ(FindOption("--policy").default_text, stream::PolicyName(library.policy));
  EXPECT_EQ(FindOption("--sinks").default_text, std::to_string(library.sinks));
  EXPECT_EQ(FindOption("--window").default_text, std::to_string(library.window));
  for (const char* v : {"generate", "chat", "stream"}) {
    SCOPED_TRACE(v);
    CLI::App* verb = verbs.verb(v);
    for (const char* name : {"--policy", "--sinks", "--window", "--kv-type", "--kv-keep"}) {
      const CLI::Option* option = verb->get_option(name);
      EXPECT_EQ(option->get_default_str(), FindOption(name).default_text) << name;
    }
  }
}

// The values the flags set are the table's defaults when not given, and the given ones otherwise
// (CLI11 binds the declared variable): checked on the structures the groups declare.
TEST(Options, GroupsBindTheirValues) {
  CLI::App app;
  CacheOptions cache;
  OutputOptions output;
  SinkOptions sink;
  cache.Add(&app);
  output.Add(&app, /*html=*/true);
  sink.Add(&app, /*with_first_k=*/true);
  app.parse("--window 28 --sinks 2 --force --json out.json --kv-type q8_0 --eps 0.5");
  EXPECT_EQ(cache.policy, "sinks");
  EXPECT_EQ(cache.sinks, 2);
  EXPECT_EQ(cache.window, 28);
  EXPECT_TRUE(cache.force);
  EXPECT_EQ(cache.kv.type, "q8_0");
  EXPECT_EQ(output.json, "out.json");
  EXPECT_EQ(output.html, "");
  EXPECT_DOUBLE_EQ(sink.eps, 0.5);
  EXPECT_EQ(sink.first_k, 4);
  const stream::StreamOptions o = cache.Options(cache.policy, "--policy");
  EXPECT_EQ(o.policy, stream::Policy::kSinks);
  EXPECT_EQ(o.sinks, 2);
  EXPECT_EQ(o.window, 28);
  EXPECT_TRUE(o.force);
  EXPECT_THROW(FindOption("--no-such-flag"), std::logic_error);
  EXPECT_EQ(&FindOption("--onset-rate"), &FindOption("--onset-threshold"));
}

}  // namespace
}  // namespace ss::cli
