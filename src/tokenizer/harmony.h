// gpt-oss's chat format, "harmony" (openai/harmony, docs/format.md: the format the gpt-oss models
// were trained on). A conversation is a sequence of messages
//   <|start|>{header}<|message|>{content}<|end|>
// whose header is the role (system, developer, user, assistant), for the assistant followed by
// <|channel|>{channel}: "analysis" (its chain of thought), "commentary" (tool calls) or "final"
// (the answer shown to the user). A prompt ends with "<|start|>assistant" and the model writes the
// rest: usually an analysis message closed by <|end|>, then
// "<|start|>assistant<|channel|>final<|message|>...<|return|>". <|return|> and <|call|> are the
// stop tokens; in the history a reply is closed by <|end|> instead (the format's implementation
// note). The system message carries the model's identity, the knowledge cutoff, the optional
// current date, the reasoning effort and the valid channels, each as the format spells them; the
// developer message carries the instructions ("# Instructions\n\n{instructions}"). Tools (function
// definitions, the browser and python tools) are not rendered.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ss {

// The special tokens of the format, by id in a tokenizer.
struct HarmonyTokens {
  int start = -1, end = -1, message = -1, channel = -1, return_ = -1, call = -1;
  // Finds them in `tokenizer` by their text ("<|start|>", ...); throws ss::Error naming the first
  // one missing, and `what` (the tokenizer's file) so the user knows which vocabulary lacks it.
  static HarmonyTokens Find(const Tokenizer& tokenizer, const std::string& what);
  bool IsSpecial(int token) const {
    return token == start || token == end || token == message || token == channel ||
           token == return_ || token == call;
  }
};

struct HarmonyMessage {
  std::string role;     // "system", "developer", "user", "assistant"
  std::string channel;  // assistant messages: "analysis", "commentary", "final"; else empty
  std::string content;
};

// The system message's content as the format spells it:
//   {identity}\nKnowledge cutoff: {cutoff}\n[Current date: {date}\n]\nReasoning: {effort}\n\n
//   # Valid channels: analysis, commentary, final. Channel must be included for every message.
// (`date` empty: no date line.)
std::string HarmonySystemContent(const std::string& identity, const std::string& cutoff,
                                 const std::string& date, const std::string& effort);
// "# Instructions\n\n{instructions}": the developer message's content.
std::string HarmonyDeveloperContent(const std::string& instructions);

// The token ids of `messages`, each closed by <|end|>; with `open_assistant` followed by
// "<|start|>assistant", the prompt from which the model writes its reply. Text is encoded with
// `tokenizer` (no BOS: the format has none) and the markers are the special tokens themselves.
std::vector<int> RenderHarmony(const Tokenizer& tokenizer, const HarmonyTokens& special,
                               const std::vector<HarmonyMessage>& messages, bool open_assistant);

// Follows an assistant reply token by token, as it is generated: which message part each token
// belongs to (header or content), the channel of the message being written, and where the reply
// ends: at <|return|> or <|call|>, or at the <|end|> that closes a message in the final channel
// (a model may also end its answer that way). Between messages (after an <|end|>) the model is
// expected to write <|start|> and a new header.
class HarmonyReplyParser {
 public:
  enum class Part { kHeader, kContent, kMarker, kOutside };
  struct Step {
    Part part = Part::kOutside;
    bool ends_reply = false;  // the token is a stop: do not feed it; the reply is over
  };
  explicit HarmonyReplyParser(const HarmonyTokens& special) : special_(special) {}
  // The token's place; `text` is its decoded text (header tokens spell the channel).
  Step Feed(int token, const std::string& text);
  // The channel of the message being written (its header's first word after <|channel|>), or ""
  // if its header named none.
  const std::string& channel() const { return channel_; }
  int stop_token() const { return stop_token_; }  // the token that ended the reply, or -1

 private:
  HarmonyTokens special_;
  // The reply starts right after "<|start|>assistant": in the header.
  Part state_ = Part::kHeader;
  bool in_channel_name_ = false;
  std::string channel_;
  int stop_token_ = -1;
};

}  // namespace ss
