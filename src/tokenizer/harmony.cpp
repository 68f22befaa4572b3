#include "tokenizer/harmony.h"

#include "common/error.h"

namespace ss {

HarmonyTokens HarmonyTokens::Find(const Tokenizer& tokenizer, const std::string& what) {
  HarmonyTokens t;
  for (auto [text, id] : {std::pair{"<|start|>", &t.start},
                          {"<|end|>", &t.end},
                          {"<|message|>", &t.message},
                          {"<|channel|>", &t.channel},
                          {"<|return|>", &t.return_},
                          {"<|call|>", &t.call}}) {
    *id = tokenizer.SpecialTokenId(text);
    if (*id < 0)
      Fail(
          "{}: the tokenizer has no special token {}, which gpt-oss's harmony chat format needs "
          "(o200k_harmony's vocabulary has it)",
          what, text);
  }
  return t;
}

std::string HarmonySystemContent(const std::string& identity, const std::string& cutoff,
                                 const std::string& date, const std::string& effort) {
  std::string s = identity + "\nKnowledge cutoff: " + cutoff + "\n";
  if (!date.empty()) s += "Current date: " + date + "\n";
  s += "\nReasoning: " + effort + "\n\n";
  s += "# Valid channels: analysis, commentary, final. Channel must be included for every message.";
  return s;
}

std::string HarmonyDeveloperContent(const std::string& instructions) {
  return "# Instructions\n\n" + instructions;
}

std::vector<int> RenderHarmony(const Tokenizer& tokenizer, const HarmonyTokens& special,
                               const std::vector<HarmonyMessage>& messages, bool open_assistant) {
  std::vector<int> out;
  auto text = [&](const std::string& s) {
    if (s.empty()) return;
    const std::vector<int> ids = tokenizer.Encode(s, /*add_bos=*/false);
    out.insert(out.end(), ids.begin(), ids.end());
  };
  for (const HarmonyMessage& m : messages) {
    out.push_back(special.start);
    text(m.role);
    if (!m.channel.empty()) {
      out.push_back(special.channel);
      text(m.channel);
    }
    out.push_back(special.message);
    text(m.content);
    out.push_back(special.end);
  }
  if (open_assistant) {
    out.push_back(special.start);
    text("assistant");
  }
  return out;
}

HarmonyReplyParser::Step HarmonyReplyParser::Feed(int token, const std::string& text) {
  Step step;
  if (token == special_.return_ || token == special_.call) {
    stop_token_ = token;
    step.part = Part::kMarker;
    step.ends_reply = true;
    return step;
  }
  if (token == special_.start) {  // a new message (also one that did not close the last)
    state_ = Part::kHeader;
    in_channel_name_ = false;
    channel_.clear();
    step.part = Part::kMarker;
    return step;
  }
  if (token == special_.end) {
    // The end of a message: of the answer if it was in the final channel, else the model goes on
    // with another message.
    step.part = Part::kMarker;
    if (state_ == Part::kContent && channel_ == "final") {
      stop_token_ = token;
      step.ends_reply = true;
    }
    state_ = Part::kOutside;
    return step;
  }
  if (state_ == Part::kHeader) {
    if (token == special_.channel) {
      in_channel_name_ = true;
      channel_.clear();
      step.part = Part::kMarker;
    } else if (token == special_.message) {
      // "final to=..." or "commentary <|constrain|>json": the channel is the first word.
      const size_t stop = channel_.find_first_of(" <");
      if (stop != std::string::npos) channel_.resize(stop);
      state_ = Part::kContent;
      step.part = Part::kMarker;
    } else {
      if (in_channel_name_) channel_ += text;
      step.part = Part::kHeader;
    }
    return step;
  }
  if (state_ == Part::kOutside && token == special_.message) {  // content without a header
    channel_.clear();
    state_ = Part::kContent;
    step.part = Part::kMarker;
    return step;
  }
  step.part = state_ == Part::kContent ? Part::kContent : Part::kOutside;
  return step;
}

}  // namespace ss
