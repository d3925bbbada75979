#pragma once
// Decoder: a decoder-only transformer built from forge ops, trainable through
// forward(tokens) with autograd and decoding through forward(tokens, cache).
//
// Architecture (DecoderConfig): token embedding; learned positions or RoPE
// (HF Llama's rotate-half convention); pre-norm blocks with LayerNorm or
// RMSNorm; multi-head or grouped-query attention (kv heads repeated as
// views); a GELU (tanh approximation, as GPT-2) or SwiGLU MLP; a final norm;
// a head tied to the embedding or separate.
//
// Weights are owned by the model (DESIGN §1). load() maps a safetensors file
// read-only and keeps weights zero-copy over the mapping where their layout
// allows; it reads forge's own files (save()), Hugging Face Llama layout and
// GPT-2 layout. Loaded with a WeightFormat, the projections are PackedMatrix
// (bf16, q8_0, q4_0) and the model only decodes: training it is refused.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "forge/exec_context.h"
#include "forge/io/safetensors.h"
#include "forge/nn/module.h"
#include "forge/tensor.h"

namespace forge::infer {

enum class WeightFormat : std::uint8_t;  // quant.h
class PackedMatrix;                      // quant.h
class KvCache;

enum class NormKind : std::uint8_t { layer_norm, rms_norm };
enum class PositionKind : std::uint8_t { learned, rope };
enum class MlpKind : std::uint8_t { gelu, swiglu };

struct DecoderConfig {
  std::int64_t vocab_size = 0, d_model = 0, n_layers = 0, n_heads = 0;
  std::int64_t n_kv_heads = 0;   // 0: n_heads (multi-head); fewer: grouped-query
  std::int64_t mlp_hidden = 0;   // 0: 4 * d_model
  std::int64_t max_seq_len = 0;  // learned positions' table size, and the longest cache
  NormKind norm = NormKind::layer_norm;
  PositionKind positions = PositionKind::learned;
  MlpKind mlp = MlpKind::gelu;
  bool tied_head = true, bias = true;
  double norm_eps = 1e-5, rope_theta = 10000.0;

  void validate() const;  // invalid_argument naming the field
  std::int64_t kv_heads() const noexcept { return n_kv_heads == 0 ? n_heads : n_kv_heads; }
  std::int64_t hidden() const noexcept { return mlp_hidden == 0 ? 4 * d_model : mlp_hidden; }
  std::int64_t head_dim() const noexcept { return n_heads == 0 ? 0 : d_model / n_heads; }
  // The config as safetensors metadata ("forge.decoder.*" keys) and back.
  io::Metadata to_metadata() const;
  static DecoderConfig from_metadata(const io::Metadata& metadata);
  bool operator==(const DecoderConfig&) const = default;
};

const char* norm_kind_name(NormKind kind);
const char* position_kind_name(PositionKind kind);
const char* mlp_kind_name(MlpKind kind);

namespace detail {
class DecoderParts;
}

class Decoder : public nn::Module {
 public:
  Decoder(ExecContext& ctx, const DecoderConfig& config);  // fresh weights, trainable
  ~Decoder() override;
  const DecoderConfig& config() const noexcept { return config_; }
  const char* type_name() const override { return "Decoder"; }

  // i64 [B, T] -> logits f32 [B, T, V], causal, no cache (training).
  Tensor forward(const Tensor& tokens) override;
  // Appends T positions to every sequence of the cache (tokens [cache.batch(), T]),
  // each at its own length; logits [B, T, V].
  Tensor forward(const Tensor& tokens, KvCache& cache);
  // Appends tokens [count, T] to sequences [seq, seq + count) of the cache only.
  Tensor forward(const Tensor& tokens, KvCache& cache, std::int64_t seq);
  // forward(tokens, cache, seq) computing only the last position's logits: [count, V].
  Tensor next_logits(const Tensor& tokens, KvCache& cache, std::int64_t seq = 0);

  // safetensors: the state dict (forge layout) and the config in the metadata,
  // plus `extra` metadata (a vocabulary, say).
  void save(const std::filesystem::path& path, const io::Metadata& extra = {}) const;
  // forge, Llama or GPT-2 layouts. With a format, the projections are packed
  // (an already quantized checkpoint keeps its own format when format is unset).
  static std::shared_ptr<Decoder> load(ExecContext& ctx, const std::filesystem::path& path,
                                       std::optional<WeightFormat> format = std::nullopt);
  // A model over given weights (forge layout names), zero-copy where possible.
  static std::shared_ptr<Decoder> from_state_dict(ExecContext& ctx, const DecoderConfig& config,
                                                  const StateDict& weights);

  // The metadata of the file load() read (empty for a fresh model).
  const io::Metadata& metadata() const noexcept { return metadata_; }
  // Bytes of the file mapping the weights live in (0 when they are not mapped).
  std::size_t mapped_bytes() const noexcept { return mapped_bytes_; }
  // The format of the projections when packed; nullopt when they are plain trainable tensors.
  std::optional<WeightFormat> weight_format() const noexcept { return format_; }
  ExecContext& context() const noexcept { return *ctx_; }

 private:
  Decoder(ExecContext& ctx, const DecoderConfig& config, const StateDict* weights,
          const std::map<std::string, PackedMatrix>* packed, std::optional<WeightFormat> format);
  Tensor run(const Tensor& tokens, KvCache* cache, std::int64_t seq, std::int64_t count, bool last_only);

  ExecContext* ctx_;
  DecoderConfig config_;
  std::unique_ptr<detail::DecoderParts> parts_;
  io::Metadata metadata_;
  std::size_t mapped_bytes_ = 0;
  std::optional<WeightFormat> format_;
};

}  // namespace forge::infer
