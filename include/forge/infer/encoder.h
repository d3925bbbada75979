#pragma once
// SentenceEncoder: a BERT encoder with pooling, as sentence-transformers runs
// one (all-MiniLM-L6-v2 and its kind), for inference.
//
// - Weights: a Hugging Face BertModel's tensors (names as BertModel saves them,
//   with or without a "bert." prefix; the pooler and anything else unused is
//   ignored), mapped read-only from model.safetensors and used in place when
//   f32 (zero-copy); f16 / bf16 / f64 are converted once into memory the
//   encoder owns. Each tensor's shape is checked against the config.
// - Forward: word + position + token-type-0 embeddings, LayerNorm, then per
//   layer self-attention over the non-padding keys, residual, LayerNorm,
//   GELU feed-forward, residual, LayerNorm (post-LN); then mean pooling over
//   the attention mask (or the [CLS] row) and, by default, L2 normalization.
// - embed() is an arena call (docs/MEMORY.md §4): it rewinds the caller's
//   arena, writes the batch's embeddings [B, hidden] f32 there as a RowsView,
//   and leaves nothing there when it fails. Its transients come from the
//   context's pool and go back to it during the pass; nothing is recorded by
//   autograd. The encoder is immutable once built.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "forge/arena.h"
#include "forge/exec_context.h"
#include "forge/infer/tokenizer.h"
#include "forge/ops/elementwise.h"
#include "forge/state_dict.h"

namespace forge::infer {

enum class Pooling : std::uint8_t { mean, cls };

struct EncoderConfig {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t max_position_embeddings = 0;
  std::int64_t type_vocab_size = 0;
  double layer_norm_eps = 1e-12;
  GeluApproximation activation = GeluApproximation::none;  // hidden_act "gelu"; "gelu_new" etc.: tanh
  Pooling pooling = Pooling::mean;
  bool normalize = true;

  // Reads a Hugging Face BERT config.json (ErrorCode::io naming the file and
  // the field for a file that cannot be read, is not JSON, lacks a size, or
  // holds one that makes no sense).
  static EncoderConfig from_json(const std::filesystem::path& config_json);
  // invalid_argument unless every size is positive and heads divide hidden.
  void validate(const char* op) const;
};

class SentenceEncoder {
 public:
  // Loads a sentence-transformers model directory: config.json,
  // model.safetensors and vocab.txt; optionally tokenizer_config.json
  // (do_lower_case, strip_accents, tokenize_chinese_chars, model_max_length),
  // sentence_bert_config.json (max_seq_length, which wins),
  // 1_Pooling/config.json (mean or CLS pooling) and modules.json (normalization
  // when it lists a Normalize module; without modules.json, normalized).
  // ErrorCode::io for a file missing or damaged, or a tensor missing; shape
  // for a tensor whose shape disagrees with the config; dtype for a tensor
  // that is not floating.
  static SentenceEncoder load(ExecContext& ctx, const std::filesystem::path& model_dir);

  // From parts: `weights` as a BertModel state dict (host tensors of one
  // context), checked as load() checks them. The tokenizer's max_length caps
  // the tokens per sentence (at most max_position_embeddings).
  SentenceEncoder(EncoderConfig config, const StateDict& weights, WordPieceTokenizer tokenizer);

  // The embeddings [sentences.size(), hidden_size] f32 of a batch, written into
  // `arena` (which must be of the weights' context). An empty batch gives 0 rows.
  RowsView embed(Arena& arena, std::span<const std::string> sentences) const;
  // The same for an already tokenized batch (ids in [0, vocab_size), each row
  // at least one token, columns at most max_position_embeddings).
  RowsView embed(Arena& arena, const TokenBatch& batch) const;

  // The last layer's hidden states [B, T, hidden] f32 (pool tensors) for ids
  // i64 [B, T] and attention_mask bool [B, T] (true: a token).
  Tensor forward(const Tensor& ids, const Tensor& attention_mask) const;

  const EncoderConfig& config() const noexcept { return config_; }
  const WordPieceTokenizer& tokenizer() const noexcept { return tokenizer_; }
  std::int64_t dimension() const noexcept { return config_.hidden_size; }
  // Bytes of the weights the encoder uses, and how many of them it owns (converted copies).
  std::size_t weight_bytes() const noexcept { return weight_bytes_; }
  std::size_t owned_weight_bytes() const noexcept { return owned_weight_bytes_; }

 private:
  struct Affine {  // a Linear's or a LayerNorm's weight and bias
    Tensor weight, bias;
  };
  struct Layer {
    Affine query, key, value, attention_out, attention_norm;  // attention.{self.*, output.dense, output.LayerNorm}
    Affine intermediate, out, out_norm;                       // intermediate.dense, output.{dense, LayerNorm}
  };

  // Checks and takes `name` (under the prefix) of shape `shape`, as f32.
  Tensor take(const char* op, const StateDict& weights, const std::string& prefix, const std::string& name,
              const Shape& shape);
  // `name`.weight of `weight_shape` and `name`.bias [weight_shape[0]].
  Affine take_affine(const char* op, const StateDict& weights, const std::string& prefix, const std::string& name,
                     const Shape& weight_shape);
  Tensor layer_forward(const Layer& l, const Tensor& x, const Tensor& key_mask) const;
  void check_batch(const char* op, const TokenBatch& batch) const;
  // embed's body once its ArenaCall is open.
  RowsView embed_into(ArenaCall& call, const TokenBatch& batch) const;

  EncoderConfig config_;
  WordPieceTokenizer tokenizer_;
  Tensor word_, position_, token_type_;
  Affine embedding_norm_;
  std::vector<Layer> layers_;
  std::size_t weight_bytes_ = 0;
  std::size_t owned_weight_bytes_ = 0;
};

}  // namespace forge::infer
