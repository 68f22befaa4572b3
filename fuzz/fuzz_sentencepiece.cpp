// Fuzzes a SentencePiece tokenizer.model (a serialised protobuf, read by libsentencepiece) through
// the trainer's conversion to tokenizer.json, which the checkpoints carry: the pieces, scores and
// types become a BPE tokenizer, which is written as tokenizer.json, parsed back, and checked on a
// probe text against SentencePiece's own encoding. libsentencepiece itself is not instrumented,
// so coverage guidance sees only sinkscope's side; the seeds are small valid models.
#include <cstddef>
#include <cstdint>

#include "common/error.h"
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "train/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ss::fuzz::WriteScratchFile("tokenizer.model", data, size);
  try {
    bool exact = false;
    const std::string json = ss::train::SentencePieceToTokenizerJson(path, &exact);
    auto tok = ss::ParseTokenizerJson("fuzz/tokenizer.json", json);
    tok->Decode(tok->Encode("Hello world, ünïcode 123 \n\t 🦙!", true));
  } catch (const ss::Error&) {
  }
  return 0;
}
