// Tokenizers: text <-> token ids for the models sinkscope studies.
//
// Supported:
//   - llama2.c tokenizer.bin files (tok512.bin, the 32K Llama 2 export): SentencePiece-style
//     merging by score with byte fallback (LoadLlama2cTokenizer).
//   - GGUF vocabularies (LoadGgufTokenizer): tokenizer.ggml.model "llama" (SentencePiece BPE with
//     byte fallback: Llama 2, Mistral, TinyLlama) and "gpt2" (byte-level BPE with the
//     pre-tokenizer named by tokenizer.ggml.pre: gpt-2, gpt-neox, llama3, qwen2, ...).
//   - Hugging Face tokenizer.json files with model.type "BPE" (LoadTokenizerJson).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ss {

class GgufFile;

class Tokenizer {
 public:
  virtual ~Tokenizer();
  // Token ids for `text`, with the model's BOS first if `add_bos`. Throws ss::Error
  // "prompt is not valid UTF-8 at byte N" for invalid input.
  virtual std::vector<int> Encode(std::string_view text, bool add_bos) const = 0;
  // The bytes `token` contributes when printed after `prev_token` (-1 at the start of the
  // stream), for streaming output: SentencePiece models drop the dummy-prefix space of the first
  // word. The bytes of one token may be an incomplete UTF-8 sequence (byte fallback pieces).
  // Throws ss::Error if a token id is out of range.
  virtual std::string DecodeToken(int prev_token, int token) const = 0;
  // The full text of `tokens`: the concatenation of DecodeToken over the sequence.
  std::string Decode(const std::vector<int>& tokens) const;
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1 if the model has none
  virtual int eos_id() const = 0;  // -1 if the model has none
  // Describes the model and pre-tokenizer, e.g. "llama2c", "spm", "bpe/gpt-2".
  virtual std::string kind() const = 0;
  // The id of the special token spelled `text` (a control or added token: "<|start|>"), or -1 if
  // the vocabulary has none. Ordinary pieces do not count.
  virtual int SpecialTokenId(std::string_view text) const = 0;
};

// llama2.c's tokenizer.bin: the vocabulary size is not stored, so the caller passes the model's.
std::unique_ptr<Tokenizer> LoadLlama2cTokenizer(const std::string& path, int vocab_size);
std::unique_ptr<Tokenizer> LoadGgufTokenizer(const GgufFile& gguf);
std::unique_ptr<Tokenizer> LoadTokenizerJson(const std::string& path);
// Parses tokenizer.json text; `name` is used in error messages (the fuzzer and tests use this).
std::unique_ptr<Tokenizer> ParseTokenizerJson(const std::string& name, std::string_view json);
// Chooses the loader from the file's content: GGUF magic, a JSON object, else llama2.c
// (which needs `vocab_size`; pass -1 when unknown and the llama2.c format is then rejected).
std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path, int vocab_size);

}  // namespace ss
