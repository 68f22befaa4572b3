#include "train/data.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/export.h"

namespace ss::train {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- Bigram-Backcopy

BigramBackcopy::BigramBackcopy(int V, int n_triggers, uint64_t table_seed, bool bos)
    : V_(V), bos_(bos), cdf_(size_t(V) * V, 0.0), start_cdf_(V, 0.0), is_trigger_(V, false) {
  SS_ASSERT(V >= 4 && n_triggers >= 1 && n_triggers < V - 2);
  Rng rng(table_seed);
  // Random rows with a heavy tail (log-normal weights, sigma 2): each token has a few likely
  // successors, like a natural-language bigram table. Guo et al. estimate theirs from text.
  std::vector<double> prob(size_t(V) * V, 0.0);
  for (int a = 1; a < V; ++a) {
    double sum = 0;
    for (int b = 1; b < V; ++b) sum += prob[size_t(a) * V + b] = std::exp(2.0 * rng.Normal());
    for (int b = 1; b < V; ++b) prob[size_t(a) * V + b] /= sum;
  }
  // Stationary distribution by power iteration; triggers are its k most frequent tokens.
  std::vector<double> pi(V, 1.0 / (V - 1)), next(V);
  pi[0] = 0;
  for (int it = 0; it < 500; ++it) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int a = 1; a < V; ++a)
      for (int b = 1; b < V; ++b) next[b] += pi[a] * prob[size_t(a) * V + b];
    pi = next;
  }
  std::vector<int> order;
  for (int a = 1; a < V; ++a) order.push_back(a);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return pi[x] > pi[y]; });
  triggers_.assign(order.begin(), order.begin() + n_triggers);
  std::sort(triggers_.begin(), triggers_.end());
  for (int t : triggers_) is_trigger_[t] = true;
  for (int a = 1; a < V; ++a) {
    double c = 0;
    for (int b = 0; b < V; ++b) cdf_[size_t(a) * V + b] = c += prob[size_t(a) * V + b];
  }
  double total = 0;
  for (int a = 1; a < V; ++a) total += is_trigger_[a] ? 0 : pi[a];
  double c = 0;
  for (int a = 0; a < V; ++a) start_cdf_[a] = c += (a == 0 || is_trigger_[a]) ? 0 : pi[a] / total;
}

int BigramBackcopy::SampleFrom(const double* cdf, Rng& rng) const {
  const double u = rng.Uniform() * cdf[V_ - 1];
  const int i = static_cast<int>(std::upper_bound(cdf, cdf + V_, u) - cdf);
  return std::min(i, V_ - 1);
}

void BigramBackcopy::Sample(Rng& rng, int n, int* out) const {
  int i = 0;
  if (bos_) out[i++] = kBos;
  // The first content token is a non-trigger drawn from the stationary distribution, so every
  // trigger has a token before it to copy.
  if (i < n) out[i++] = SampleFrom(start_cdf_.data(), rng);
  for (; i < n; ++i) {
    const int prev = out[i - 1];
    out[i] = is_trigger_[prev] ? out[i - 2] : SampleFrom(&cdf_[size_t(prev) * V_], rng);
  }
}

void BigramBackcopy::TrainBatch(Rng& rng, int B, int T, int* tokens, int* targets) const {
  std::vector<int> seq(T + 1);
  for (int b = 0; b < B; ++b) {
    Sample(rng, T + 1, seq.data());
    std::copy(seq.begin(), seq.begin() + T, tokens + size_t(b) * T);
    std::copy(seq.begin() + 1, seq.end(), targets + size_t(b) * T);
  }
}

void BigramBackcopy::ValBatch(int index, int B, int T, int* tokens, int* targets) const {
  Rng rng(0x5eed0000ull + static_cast<uint64_t>(index));  // fixed: the same data every evaluation
  TrainBatch(rng, B, T, tokens, targets);
}

std::string BigramBackcopy::Describe() const {
  return fmt::format("Bigram-Backcopy: V={} triggers [{}] {}", V_, fmt::join(triggers_, ","),
                     bos_ ? "with BOS" : "without BOS");
}

// ---------------------------------------------------------------- text

namespace {

std::vector<std::string> SplitDocuments(const std::string& text) {
  // Documents are separated by one or more blank lines.
  std::vector<std::string> docs;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) end = text.size();
    std::string doc = text.substr(pos, end - pos);
    if (doc.find_first_not_of(" \t\r\n") != std::string::npos) docs.push_back(std::move(doc));
    pos = end;
    while (pos < text.size() && text[pos] == '\n') ++pos;
  }
  return docs;
}

// libsentencepiece reports most damage as a status, but some (an empty piece: Darts' "zero-length
// key", found by fuzz_sentencepiece) as a C++ exception out of Load; both become an ss::Error.
void LoadSentencePiece(sentencepiece::SentencePieceProcessor& sp, const std::string& path) {
  sentencepiece::util::Status st;
  try {
    st = sp.Load(path);
  } catch (const std::exception& e) {
    Fail("{}: cannot load the SentencePiece model: {}", path, e.what());
  }
  if (!st.ok()) Fail("{}: cannot load the SentencePiece model: {}", path, st.ToString());
}

}  // namespace

std::string SentencePieceToTokenizerJson(const std::string& spm_path, bool* exact) {
  sentencepiece::SentencePieceProcessor sp;
  LoadSentencePiece(sp, spm_path);
  BpeModel m;
  m.kind = BpeModel::Kind::kSentencePiece;
  m.name = "sentencepiece-bpe";
  m.source = spm_path;
  m.add_space_prefix = true;  // SentencePiece's add_dummy_prefix (the trainer's default)
  m.bos = sp.bos_id();
  m.eos = sp.eos_id();
  m.unk = sp.unk_id();
  const int n = sp.GetPieceSize();
  for (int i = 0; i < n; ++i) {
    m.pieces.push_back(sp.IdToPiece(i));
    m.scores.push_back(sp.GetScore(i));
    m.types.push_back(sp.IsUnknown(i)   ? TokenType::kUnknown
                      : sp.IsControl(i) ? TokenType::kControl
                      : sp.IsByte(i)    ? TokenType::kByte
                                        : TokenType::kNormal);
  }
  const BpeTokenizer tok(std::move(m));
  const std::string json = TokenizerJsonText(tok);
  if (exact) {
    const std::string probe =
        "Once upon a time,  there were 1234 \"tiny\" stories.\n\tThe end \xC3\xA9t\xC3\xA9 "
        "\xE2\x9C\x93!";
    std::vector<int> want;
    (void)sp.Encode(probe, &want);
    *exact = ParseTokenizerJson(spm_path, json)->Encode(probe, /*add_bos=*/false) == want;
  }
  return json;
}

TextCorpusFiles PrepareTextCorpus(const TrainConfig& c, const std::string& dir, int num_threads) {
  TextCorpusFiles files{c.tokenizer.empty() ? dir + "/tokenizer.model" : c.tokenizer,
                        dir + "/tokens.u16", dir + "/docs.u32"};
  if (FileExists(files.tokens) && FileExists(files.docs) && FileExists(files.tokenizer))
    return files;  // made by an earlier run of this configuration (resume)
  const std::string text = ReadFile(c.corpus);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    Fail("{}: the corpus is empty (need text to train on)", c.corpus);
  CreateDirectories(dir, "--out");
  if (c.tokenizer.empty()) {
    // BPE as in Sennrich et al. 2016, via SentencePiece (Kudo & Richardson 2018). Byte fallback
    // keeps every input encodable; unk 0, bos 1, eos 2, identity normalisation and whitespace kept
    // as in Llama 2 (so the checkpoint's tokenizer.json reproduces it exactly).
    const std::string prefix = dir + "/tokenizer.tmp";
    const std::string args = fmt::format(
        "--input={} --model_prefix={} --vocab_size={} --model_type=bpe --character_coverage=1.0 "
        "--byte_fallback=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --num_threads={} "
        "--max_sentence_length=16384 --split_digits=true --normalization_rule_name=identity "
        "--remove_extra_whitespaces=false --minloglevel=2",
        c.corpus, prefix, c.vocab_size, std::max(1, num_threads));
    const auto status = sentencepiece::SentencePieceTrainer::Train(args);
    if (!status.ok())
      Fail("{}: training a {}-token SentencePiece BPE tokenizer failed: {}", c.corpus, c.vocab_size,
           status.ToString());
    fs::rename(prefix + ".model", files.tokenizer);
    fs::remove(prefix + ".vocab");
  }
  sentencepiece::SentencePieceProcessor sp;
  LoadSentencePiece(sp, files.tokenizer);
  if (sp.GetPieceSize() != c.vocab_size)
    Fail("{}: tokenizer has {} pieces, the config says vocab_size {}", files.tokenizer,
         sp.GetPieceSize(), c.vocab_size);
  std::vector<uint16_t> tokens;
  std::vector<uint32_t> starts;
  std::vector<int> ids;
  for (const std::string& doc : SplitDocuments(text)) {
    if (const auto st = sp.Encode(doc, &ids); !st.ok())
      Fail("{}: encoding failed: {}", c.corpus, st.ToString());
    if (ids.empty()) continue;
    starts.push_back(static_cast<uint32_t>(tokens.size()));
    for (int id : ids) tokens.push_back(static_cast<uint16_t>(id));
  }
  WriteFileAtomic(files.tokens, std::string_view(reinterpret_cast<const char*>(tokens.data()),
                                                 tokens.size() * sizeof(uint16_t)));
  WriteFileAtomic(files.docs, std::string_view(reinterpret_cast<const char*>(starts.data()),
                                               starts.size() * sizeof(uint32_t)));
  return files;
}

TextData::TextData(const TextCorpusFiles& files, const TrainConfig& c)
    : bos_(c.bos), sink_token_(c.sink_token), bos_id_(1), corpus_(c.corpus) {
  tokens_map_ = MapFile(files.tokens);
  docs_map_ = MapFile(files.docs);
  tok_ = reinterpret_cast<const uint16_t*>(tokens_map_->data);
  n_tokens_ = static_cast<int64_t>(tokens_map_->size / sizeof(uint16_t));
  // The token file is reused from an earlier run (resume, or a run directory's data/): its ids
  // must fit this configuration's vocabulary, which sizes the embedding they index.
  if (const uint16_t* top = std::max_element(tok_, tok_ + n_tokens_);
      n_tokens_ > 0 && *top >= c.vocab_size)
    Fail(
        "{}: holds token id {}, outside this run's vocabulary of {} (vocab_size); it was made by "
        "a run with a larger vocabulary: remove the run's data/ directory or train into a new "
        "--out",
        files.tokens, *top, c.vocab_size);
  split_ = static_cast<int64_t>(std::floor(n_tokens_ * (1.0 - c.val_fraction)));
  const int need = c.seq_len + 1;
  if (split_ < need || n_tokens_ - split_ < need)
    Fail(
        "{}: too small: {} tokens after encoding ({} for training, {} for validation), need at "
        "least {} in each split for one window of seq_len {}",
        c.corpus, n_tokens_, split_, n_tokens_ - split_, need, c.seq_len);
  const uint32_t* d = reinterpret_cast<const uint32_t*>(docs_map_->data);
  const size_t nd = docs_map_->size / sizeof(uint32_t);
  for (size_t i = 0; i < nd; ++i) {
    if (int64_t(d[i]) + c.seq_len <= split_)
      docs_train_.push_back(d[i]);
    else if (int64_t(d[i]) >= split_ && int64_t(d[i]) + c.seq_len <= n_tokens_)
      docs_val_.push_back(d[i]);
  }
  if (bos_ && (docs_train_.empty() || docs_val_.empty()))
    Fail(
        "{}: --bos needs document starts (blank-line separated) with {} tokens after them in "
        "both splits; found {} (train) and {} (validation)",
        c.corpus, c.seq_len, docs_train_.size(), docs_val_.size());
}

// tokens = [BOS] + stream[start, start + T - 1) with bos, else stream[start, start + T);
// targets are the next tokens.
void TextData::Window(int64_t start, int T, bool with_bos, int* tokens, int* targets) const {
  if (with_bos) {
    tokens[0] = bos_id_;
    for (int t = 1; t < T; ++t) tokens[t] = tok_[start + t - 1];
    for (int t = 0; t < T; ++t) targets[t] = tok_[start + t];
  } else {
    for (int t = 0; t < T; ++t) {
      tokens[t] = tok_[start + t];
      targets[t] = tok_[start + t + 1];
    }
  }
}

void TextData::TrainBatch(Rng& rng, int B, int T, int* tokens, int* targets) const {
  for (int b = 0; b < B; ++b) {
    int64_t start;
    if (bos_)
      start = docs_train_[rng.Next() % docs_train_.size()];
    else
      start = static_cast<int64_t>(rng.Next() % uint64_t(split_ - T));
    Window(start, T, bos_ || sink_token_, tokens + int64_t(b) * T, targets + int64_t(b) * T);
  }
}

void TextData::ValBatch(int index, int B, int T, int* tokens, int* targets) const {
  // Evenly spaced, fixed windows of the held-out tail.
  for (int b = 0; b < B; ++b) {
    const int64_t k = int64_t(index) * B + b;
    int64_t start;
    if (bos_)
      start = docs_val_[(k * 7919) % docs_val_.size()];
    else
      start = split_ + (k * 104729) % (n_tokens_ - split_ - T);
    Window(start, T, bos_ || sink_token_, tokens + int64_t(b) * T, targets + int64_t(b) * T);
  }
}

std::string TextData::Describe() const {
  return fmt::format("text {}: {} tokens ({} train), {} documents, windows {}", corpus_, n_tokens_,
                     split_, docs_train_.size() + docs_val_.size(),
                     bos_          ? "at document starts with BOS"
                     : sink_token_ ? "at random offsets behind a sink token (BOS id 1)"
                                   : "at random offsets (no BOS)");
}

std::unique_ptr<DataSource> MakeDataSource(const TrainConfig& c, const std::string& out_dir,
                                           std::string* tokenizer_path) {
  if (c.data == DataKind::kBigramBackcopy) {
    if (tokenizer_path) tokenizer_path->clear();
    return std::make_unique<BigramBackcopy>(c.vocab_size, c.bb_triggers, c.bb_seed, c.bos);
  }
  const TextCorpusFiles files = PrepareTextCorpus(c, out_dir + "/data", c.threads);
  if (tokenizer_path) *tokenizer_path = files.tokenizer;
  return std::make_unique<TextData>(files, c);
}

}  // namespace ss::train
