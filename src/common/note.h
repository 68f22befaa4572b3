// Notes: lines for the user that are not errors, such as input that is read but deliberately not
// applied because the reference implementation does not apply it (a Gemma 3 config's
// attn_logit_softcapping). Library code issues them; where they go is the program's choice.
#pragma once

#include <functional>
#include <string>

namespace ss {

// Writes "sinkscope: note: <line>" to stderr, or hands the line to the sink SetNoteSink installed.
void Note(const std::string& line);

// Replaces where notes go (an empty function: stderr again); returns the previous sink.
using NoteSink = std::function<void(const std::string&)>;
NoteSink SetNoteSink(NoteSink sink);

}  // namespace ss
