#pragma once
// The pieces of a Decoder (include/forge/infer/decoder.h), shared by
// decoder.cpp (building and running them) and decoder_load.cpp (the file
// layouts). Every piece is an nn::Module, so the model's state dict names
// are the forge layout:
//   tok_embed.weight, pos_embed.weight (learned positions),
//   layers.N.attn_norm.{weight,bias}, layers.N.attn.{q,k,v,o}.{weight,bias},
//   layers.N.mlp_norm.{weight,bias}, layers.N.mlp.{gate,up,down}.{weight,bias},
//   norm.{weight,bias}, head.weight (untied head).
// (bias entries only where the config has them; a LayerNorm always has one.)

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "forge/infer/decoder.h"
#include "forge/infer/quant.h"
#include "forge/nn/module.h"

namespace forge::infer::detail {

// The pieces read their tensors through the registered slots on every call
// (as nn::Linear does), so Module::to and load_state_dict reach them.

// A table looked up by index: the token or position embedding.
class Table : public nn::Module {
 public:
  Table(Tensor weight, bool trainable) { register_parameter("weight", weight, trainable); }
  const char* type_name() const override { return "Table"; }
  const Tensor& weight() const { return parameter("weight"); }
};

// y = x W^T + b with W [out, in]: a plain (trainable) weight, or a PackedMatrix.
// x @ w^T + b through forge::linear, or infer::linear's f32 kernel for a few
// rows without autograd (Note [Few rows through infer::linear]).
Tensor project(const Tensor& x, const Tensor& w, const Tensor& b);

class Projection : public nn::Module {
 public:
  Projection(Tensor weight, Tensor bias);
  Projection(PackedMatrix packed, Tensor bias);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "Projection"; }
  const PackedMatrix& packed() const noexcept { return packed_; }

 private:
  Tensor bias() const { return has_bias_ ? parameter("bias") : Tensor(); }
  bool has_bias_;
  PackedMatrix packed_;
};

class Norm : public nn::Module {
 public:
  Norm(NormKind kind, double eps, Tensor weight, Tensor bias);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "Norm"; }

 private:
  NormKind kind_;
  double eps_;
};

struct Block {
  std::shared_ptr<Norm> attn_norm, mlp_norm;
  std::shared_ptr<Projection> q, k, v, o, gate, up, down;  // gate only for SwiGLU
};

// Hands each piece its weights: from a state dict in forge names (checked
// against the expected shape, converted to f32 where stored otherwise), or
// freshly initialized; with a format, the projections are packed.
class WeightSource {
 public:
  WeightSource(ExecContext& ctx, const StateDict* weights, const std::map<std::string, PackedMatrix>* packed,
               std::optional<WeightFormat> format);
  Tensor take(const std::string& name, const Shape& shape, const std::function<Tensor()>& init);
  // A projection's weight [rows, cols], packed when the source packs.
  std::shared_ptr<Projection> projection(const std::string& name, std::int64_t rows, std::int64_t cols, bool bias);
  // `w` [rows, cols] in the source's format (f32 where its blocks do not fit).
  PackedMatrix pack(const Tensor& w) const;
  // invalid_argument listing the tensors of the file no piece took.
  void check_all_used() const;
  // The tensor called `name` in the checkpoint (a packed one dequantized), or undefined.
  Tensor find(const std::string& name) const;
  bool packs() const noexcept { return format_.has_value(); }
  std::optional<WeightFormat> format() const noexcept { return format_; }

 private:
  ExecContext& ctx_;
  const StateDict* weights_;
  const std::map<std::string, PackedMatrix>* packed_;
  std::optional<WeightFormat> format_;
  std::set<std::string> used_;
};

struct DecoderParts {
  std::shared_ptr<Table> tok_embed, pos_embed;  // pos_embed only for learned positions
  std::vector<Block> blocks;
  std::shared_ptr<Norm> norm;
  std::shared_ptr<Projection> head;  // an untied head, or a packed copy of the tied one
  Tensor rope_cos, rope_sin;         // [max_seq_len, head_dim], for RoPE
};

}  // namespace forge::infer::detail
