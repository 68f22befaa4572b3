// Training data: batches of B sequences of T input tokens and their T next-token targets.
//  - Bigram-Backcopy (Guo et al. 2024, arXiv 2410.13835, sec. 2): tokens follow a fixed random
//    bigram transition table, except that right after one of k "trigger" tokens the next token
//    copies the token just before the trigger. Optionally a BOS token (id 0) at position 0.
//  - Natural text: a SentencePiece BPE tokenizer trained on the corpus (libsentencepiece), the
//    corpus encoded once into a memory-mapped uint16 token file, random windows of T + 1 tokens;
//    with bos, windows start at document boundaries (blank-line separated) behind a BOS token.
// Training batches draw from an Rng the trainer owns (and checkpoints); validation batches are a
// fixed function of their index, so every evaluation sees the same data.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "train/rng.h"
#include "train/train_config.h"

namespace ss::train {

class DataSource {
 public:
  virtual ~DataSource() = default;
  // tokens, targets: (B*T) each.
  virtual void TrainBatch(Rng& rng, int B, int T, int* tokens, int* targets) const = 0;
  virtual void ValBatch(int index, int B, int T, int* tokens, int* targets) const = 0;
  virtual std::string Describe() const = 0;
};

class BigramBackcopy : public DataSource {
 public:
  static constexpr int kBos = 0;
  // vocab_size tokens: id 0 is BOS, 1..V-1 are content tokens. The table and the triggers (the k
  // most frequent tokens under the chain's stationary distribution, as Guo et al. fix them) come
  // from table_seed alone.
  BigramBackcopy(int vocab_size, int n_triggers, uint64_t table_seed, bool bos);
  // One sequence of n tokens.
  void Sample(Rng& rng, int n, int* out) const;
  void TrainBatch(Rng& rng, int B, int T, int* tokens, int* targets) const override;
  void ValBatch(int index, int B, int T, int* tokens, int* targets) const override;
  std::string Describe() const override;
  bool IsTrigger(int token) const { return is_trigger_[token]; }
  const std::vector<int>& triggers() const { return triggers_; }
  // P(next | current) for content tokens (row-major V x V, row/col 0 unused).
  const std::vector<double>& table() const { return cdf_; }

 private:
  int SampleFrom(const double* cdf, Rng& rng) const;
  int V_;
  bool bos_;
  std::vector<double> cdf_;        // (V, V) cumulative transition rows
  std::vector<double> start_cdf_;  // (V) stationary distribution over non-trigger tokens
  std::vector<int> triggers_;
  std::vector<bool> is_trigger_;
};

// Artifacts of a text run, made once in `dir` and reused on resume:
//   tokenizer.model  SentencePiece BPE model (trained unless config.tokenizer names one)
//   tokens.u16       the corpus encoded, uint16 little-endian, documents concatenated
//   docs.u32         the token offset of each document start, uint32
struct TextCorpusFiles {
  std::string tokenizer, tokens, docs;
};
// The SentencePiece BPE model at `spm_path` as a Hugging Face tokenizer.json (BPE, byte fallback,
// "\u2581" space marker with a dummy prefix), so checkpoints load like any HF model. Exact for
// the tokenizers this trainer makes (identity normalisation, whitespace kept, as Llama 2's); a
// model trained with another normaliser is converted without it, and `exact` says so (checked by
// encoding a probe text both ways).
std::string SentencePieceToTokenizerJson(const std::string& spm_path, bool* exact = nullptr);

TextCorpusFiles PrepareTextCorpus(const TrainConfig& config, const std::string& dir,
                                  int num_threads);

class TextData : public DataSource {
 public:
  // Maps the token files. Throws ss::Error naming the corpus when it is too small for one window
  // in the training or the validation split.
  TextData(const TextCorpusFiles& files, const TrainConfig& config);
  void TrainBatch(Rng& rng, int B, int T, int* tokens, int* targets) const override;
  void ValBatch(int index, int B, int T, int* tokens, int* targets) const override;
  std::string Describe() const override;
  int64_t train_tokens() const { return split_; }
  int bos_id() const { return bos_id_; }

 private:
  void Window(int64_t start, int T, bool with_bos, int* tokens, int* targets) const;
  std::shared_ptr<MappedFile> tokens_map_, docs_map_;
  const uint16_t* tok_ = nullptr;
  int64_t n_tokens_ = 0;
  std::vector<int64_t> docs_train_, docs_val_;
  int64_t split_ = 0;  // tokens [0, split) train, [split, n) validation
  bool bos_;
  bool sink_token_;  // random windows, each behind the BOS id (TrainConfig::sink_token)
  int bos_id_;
  std::string corpus_;
};

std::unique_ptr<DataSource> MakeDataSource(const TrainConfig& config, const std::string& out_dir,
                                           std::string* tokenizer_path);

}  // namespace ss::train
