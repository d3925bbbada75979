// The sentence-encoder path (include/forge/infer/tokenizer.h, encoder.h):
// WordPiece on a hand-written vocabulary (normalization, punctuation, pieces,
// [UNK], truncation, padding), and a tiny BERT checkpoint the tests write
// themselves, compared with a float64 forward pass written out in loops here;
// padding invariance, pooling options, the arena statuses, and the load errors.

#include "forge/infer/encoder.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "forge/infer/tokenizer.h"
#include "support.h"
#include "temp_dir.h"

using forge::Arena;
using forge::DType;
using forge::RowsView;
using forge::Shape;
using forge::StateDict;
using forge::Tensor;
using forge::infer::SentenceEncoder;
using forge::infer::TokenBatch;
using forge::infer::WordPieceOptions;
using forge::infer::WordPieceTokenizer;
using forge_test::TestContext;
namespace fs = std::filesystem;

namespace {

using Strings = std::vector<std::string>;

const Strings kVocab = {"[PAD]", "[UNK]",  "[CLS]", "[SEP]", "[MASK]", "the",   "cafe",  "naive", "resume", "un",
                        "##aff", "##able", "!",     ",",     ".",      "hello", "world", "a",     "##b",    "##c",
                        "中",    "文",     "i",     "ka",    "$",      "dog",   "runs",  "fast",  "##s",    "run"};

WordPieceTokenizer tokenizer(WordPieceOptions options = {}) { return WordPieceTokenizer(kVocab, options); }

// ---- the tiny model: files and a float64 reference ----

struct Tiny {
  std::int64_t vocab = static_cast<std::int64_t>(kVocab.size());
  std::int64_t hidden = 32, layers = 2, heads = 4, inner = 64, positions = 16, types = 2;
};

StateDict tiny_weights(forge::ExecContext& ctx, const Tiny& m, const std::string& prefix = "") {
  StateDict w;
  const auto normal = [&](const std::string& name, const Shape& shape, double scale, double shift = 0.0) {
    w[prefix + name] = ctx.randn(shape).mul(scale).add(shift);
  };
  normal("embeddings.word_embeddings.weight", {m.vocab, m.hidden}, 0.5);
  normal("embeddings.position_embeddings.weight", {m.positions, m.hidden}, 0.5);
  normal("embeddings.token_type_embeddings.weight", {m.types, m.hidden}, 0.5);
  normal("embeddings.LayerNorm.weight", {m.hidden}, 0.1, 1.0);
  normal("embeddings.LayerNorm.bias", {m.hidden}, 0.1);
  for (std::int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* proj :
         {"attention.self.query.", "attention.self.key.", "attention.self.value.", "attention.output.dense."}) {
      normal(p + proj + "weight", {m.hidden, m.hidden}, 0.3);
      normal(p + proj + "bias", {m.hidden}, 0.1);
    }
    normal(p + "intermediate.dense.weight", {m.inner, m.hidden}, 0.3);
    normal(p + "intermediate.dense.bias", {m.inner}, 0.1);
    normal(p + "output.dense.weight", {m.hidden, m.inner}, 0.2);
    normal(p + "output.dense.bias", {m.hidden}, 0.1);
    for (const char* ln : {"attention.output.LayerNorm.", "output.LayerNorm."}) {
      normal(p + ln + "weight", {m.hidden}, 0.1, 1.0);
      normal(p + ln + "bias", {m.hidden}, 0.1);
    }
  }
  normal("pooler.dense.weight", {m.hidden, m.hidden}, 0.3);  // unused, as in real checkpoints
  return w;
}

std::string config_json(const Tiny& m) {
  return "{\"architectures\": [\"BertModel\"], \"model_type\": \"bert\", \"hidden_act\": \"gelu\", "
         "\"vocab_size\": " +
         std::to_string(m.vocab) + ", \"hidden_size\": " + std::to_string(m.hidden) +
         ", \"num_hidden_layers\": " + std::to_string(m.layers) +
         ", \"num_attention_heads\": " + std::to_string(m.heads) +
         ", \"intermediate_size\": " + std::to_string(m.inner) +
         ", \"max_position_embeddings\": " + std::to_string(m.positions) +
         ", \"type_vocab_size\": " + std::to_string(m.types) +
         ", \"layer_norm_eps\": 1e-12, \"position_embedding_type\": \"absolute\"}";
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A sentence-transformers directory under /tmp with the tiny model, removed
// when the case ends.
class ModelDir : public forge_test::TempDir {
 public:
  ModelDir(forge::ExecContext& ctx, const Tiny& m = {}, const std::string& prefix = "") {
    weights = tiny_weights(ctx, m, prefix);
    forge::io::save_safetensors(path() / "model.safetensors", weights);
    write_text(path() / "config.json", config_json(m));
    std::string vocab;
    for (const std::string& t : kVocab) vocab += t + "\n";
    write_text(path() / "vocab.txt", vocab);
    write_text(path() / "sentence_bert_config.json", "{\"max_seq_length\": 12, \"do_lower_case\": false}");
  }

  StateDict weights;
};

using Matrix = std::vector<std::vector<double>>;  // [rows][cols]

Matrix matrix(const Tensor& t) {
  const std::vector<double> v = t.to(DType::f64).to_vector<double>();
  const std::int64_t rows = t.dim() == 1 ? 1 : t.size(0), cols = t.size(t.dim() - 1);
  Matrix m(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) m[r].assign(v.begin() + r * cols, v.begin() + (r + 1) * cols);
  return m;
}

// x [T][in] times w [out][in] transposed plus b.
Matrix dense(const Matrix& x, const Tensor& weight, const Tensor& bias) {
  const Matrix w = matrix(weight);
  const std::vector<double> b = matrix(bias)[0];
  Matrix y(x.size(), std::vector<double>(w.size()));
  for (std::size_t t = 0; t < x.size(); ++t)
    for (std::size_t o = 0; o < w.size(); ++o) {
      double s = b[o];
      for (std::size_t i = 0; i < x[t].size(); ++i) s += x[t][i] * w[o][i];
      y[t][o] = s;
    }
  return y;
}

void layer_norm(Matrix& x, const Tensor& weight, const Tensor& bias, double eps = 1e-12) {
  const std::vector<double> g = matrix(weight)[0], b = matrix(bias)[0];
  for (auto& row : x) {
    double mean = 0, var = 0;
    for (double v : row) mean += v;
    mean /= static_cast<double>(row.size());
    for (double v : row) var += (v - mean) * (v - mean);
    var /= static_cast<double>(row.size());
    for (std::size_t i = 0; i < row.size(); ++i) row[i] = (row[i] - mean) / std::sqrt(var + eps) * g[i] + b[i];
  }
}

// The sentence embedding of `ids` (no padding) by BERT's definition, in float64.
std::vector<double> reference_embedding(const StateDict& w, const Tiny& m, const std::vector<std::int64_t>& ids,
                                        bool mean_pooling = true, bool normalize = true) {
  const auto W = [&](const std::string& name) { return w.at(name); };
  const Matrix word = matrix(W("embeddings.word_embeddings.weight"));
  const Matrix pos = matrix(W("embeddings.position_embeddings.weight"));
  const Matrix type = matrix(W("embeddings.token_type_embeddings.weight"));
  const std::size_t T = ids.size(), H = static_cast<std::size_t>(m.hidden);
  Matrix x(T, std::vector<double>(H));
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < H; ++i) x[t][i] = word[ids[t]][i] + type[0][i] + pos[t][i];
  layer_norm(x, W("embeddings.LayerNorm.weight"), W("embeddings.LayerNorm.bias"));
  const std::size_t heads = static_cast<std::size_t>(m.heads), dh = H / heads;
  for (std::int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    const Matrix q = dense(x, W(p + "attention.self.query.weight"), W(p + "attention.self.query.bias"));
    const Matrix k = dense(x, W(p + "attention.self.key.weight"), W(p + "attention.self.key.bias"));
    const Matrix v = dense(x, W(p + "attention.self.value.weight"), W(p + "attention.self.value.bias"));
    Matrix ctx(T, std::vector<double>(H, 0.0));
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < T; ++i) {
        std::vector<double> s(T);
        double mx = -1e300, z = 0;
        for (std::size_t j = 0; j < T; ++j) {
          double d = 0;
          for (std::size_t e = 0; e < dh; ++e) d += q[i][h * dh + e] * k[j][h * dh + e];
          s[j] = d / std::sqrt(static_cast<double>(dh));
          mx = std::max(mx, s[j]);
        }
        for (double& sj : s) z += (sj = std::exp(sj - mx));
        for (std::size_t j = 0; j < T; ++j)
          for (std::size_t e = 0; e < dh; ++e) ctx[i][h * dh + e] += s[j] / z * v[j][h * dh + e];
      }
    Matrix a = dense(ctx, W(p + "attention.output.dense.weight"), W(p + "attention.output.dense.bias"));
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t i = 0; i < H; ++i) a[t][i] += x[t][i];
    layer_norm(a, W(p + "attention.output.LayerNorm.weight"), W(p + "attention.output.LayerNorm.bias"));
    Matrix inner = dense(a, W(p + "intermediate.dense.weight"), W(p + "intermediate.dense.bias"));
    for (auto& row : inner)
      for (double& u : row) u = 0.5 * u * (1.0 + std::erf(u / std::sqrt(2.0)));
    x = dense(inner, W(p + "output.dense.weight"), W(p + "output.dense.bias"));
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t i = 0; i < H; ++i) x[t][i] += a[t][i];
    layer_norm(x, W(p + "output.LayerNorm.weight"), W(p + "output.LayerNorm.bias"));
  }
  std::vector<double> e(H, 0.0);
  for (std::size_t t = 0; t < (mean_pooling ? T : 1); ++t)
    for (std::size_t i = 0; i < H; ++i) e[i] += x[t][i] / (mean_pooling ? static_cast<double>(T) : 1.0);
  if (normalize) {
    double n = 0;
    for (double u : e) n += u * u;
    for (double& u : e) u /= std::sqrt(n);
  }
  return e;
}

std::vector<float> row_of(const RowsView& rows, std::int64_t r) {
  const auto* p = reinterpret_cast<const float*>(static_cast<const char*>(rows.data()) +
                                                 r * static_cast<std::int64_t>(rows.row_stride_bytes()));
  return std::vector<float>(p, p + rows.columns());
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - b[i]));
  return d;
}

const Strings kSentences = {"the dog runs", "Hello, world! The cafe is naive.", "unaffable dogs run fast"};

}  // namespace

// ---------------------------------------------------------------------------
// The tokenizer

TEST_CASE("tokenizer: lowercases, strips accents, splits punctuation", "[infer][encoder]") {
  const WordPieceTokenizer tok = tokenizer();
  CHECK(tok.tokenize("Héllo, WORLD!") == Strings{"hello", ",", "world", "!"});
  CHECK(tok.tokenize("Café   NAÏVE résumé.") == Strings{"cafe", "naive", "resume", "."});
  CHECK(tok.tokenize("$hello") == Strings{"$", "hello"});  // an ASCII symbol splits like punctuation
  // Latin-1 and Latin Extended-A letters lose their marks; Hangul decomposes to jamo; kana lose dakuten.
  CHECK(tok.normalize("ÀÉÎÕÜ Ç Ñ Ÿ Ă Ş Ž Ő ŷ") == "aeiou c n y a s z o y");
  CHECK(tok.normalize("ßøæđ") == "ßøæđ");                                          // no canonical decomposition: kept
  CHECK(tok.normalize("\xED\x95\x9C") == "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB");  // 한 -> ᄒ ᅡ ᆫ
  CHECK(tok.normalize("\xE3\x81\x8C") == "\xE3\x81\x8B");                          // が -> か
  CHECK(tok.normalize("ΣΑΣ Ä") == "σασ a");
  CHECK(tok.normalize("\xC4\xB0") == "i");  // İ: stripped to I, then lowercased
  // Without lowercasing and stripping the text keeps its case and marks.
  const WordPieceTokenizer cased = tokenizer({.lowercase = false, .strip_accents = false});
  CHECK(cased.normalize("Café İ") == "Café İ");
  CHECK(tokenizer({.strip_accents = false}).normalize("Café İ") == "café i\xCC\x87");
}

TEST_CASE("tokenizer: whitespace, control characters, invalid UTF-8 and CJK", "[infer][encoder]") {
  const WordPieceTokenizer tok = tokenizer();
  CHECK(tok.tokenize("\tthe\n\xC2\xA0world\xE3\x80\x80 \r") == Strings{"the", "world"});  // NBSP, ideographic space
  CHECK(tok.tokenize("hel\x07lo wor\xE2\x80\x8B"
                     "ld") == Strings{"hello", "world"});  // BEL and U+200B dropped
  CHECK(tok.tokenize("a\xEE\x80\x80"
                     "b") == Strings{"a", "##b"});  // private use (Co): dropped
  CHECK(tok.tokenize("a\xCD\xB8"
                     "b") == Strings{"[UNK]"});              // unassigned U+0378: kept, as the reference does
  CHECK(tok.tokenize("hel\xFFlo") == Strings{"hello"});      // a bad byte: U+FFFD, dropped
  CHECK(tok.tokenize("hel\xC0\xAFlo") == Strings{"hello"});  // an overlong '/': dropped
  CHECK(tok.tokenize("the\xE2\x80\xA8world") == Strings{"the", "world"});  // U+2028 separates
  CHECK(tok.tokenize("中文the") == Strings{"中", "文", "the"});            // each ideograph a word of its own
  CHECK(tokenizer({.split_cjk = false}).tokenize("中文") == Strings{"[UNK]"});
  CHECK(tok.tokenize("").empty());
  CHECK(tok.tokenize(" \t\n").empty());
}

TEST_CASE("tokenizer: greedy longest-match pieces, [UNK] for unmatched or over-long words", "[infer][encoder]") {
  const WordPieceTokenizer tok = tokenizer();
  CHECK(tok.tokenize("unaffable") == Strings{"un", "##aff", "##able"});
  CHECK(tok.tokenize("runs") == Strings{"runs"});  // the longest match first, not run ##s
  CHECK(tok.tokenize("dogs") == Strings{"dog", "##s"});
  CHECK(tok.tokenize("abcbc") == Strings{"a", "##b", "##c", "##b", "##c"});
  CHECK(tok.tokenize("abx the") == Strings{"[UNK]", "the"});  // one unmatched part makes the word [UNK]
  CHECK(tok.tokenize("xyz") == Strings{"[UNK]"});
  // max_input_chars_per_word (100) counts code points: 100 pass, 101 are [UNK].
  const std::string word100 = "a" + std::string(99, 'b');
  CHECK(tok.tokenize(word100).size() == 100);
  CHECK(tok.tokenize(word100 + "b") == Strings{"[UNK]"});
  CHECK(tokenizer({.max_input_chars_per_word = 4}).tokenize("abcb abcbc") ==
        Strings{"a", "##b", "##c", "##b", "[UNK]"});
}

TEST_CASE("tokenizer: [CLS] and [SEP], truncation, batches padded to the longest", "[infer][encoder]") {
  const WordPieceTokenizer tok = tokenizer({.max_length = 6});
  CHECK(tok.encode("the dog") == std::vector<std::int64_t>{2, 5, 25, 3});
  CHECK(tok.encode("") == std::vector<std::int64_t>{2, 3});
  // Truncation cuts the pieces and keeps [SEP]: 6 tokens in all.
  CHECK(tok.encode("unaffable dog runs fast") == std::vector<std::int64_t>{2, 9, 10, 11, 25, 3});

  const Strings texts = {"the", "unaffable dog runs fast", "dog runs"};
  const TokenBatch b = tok.encode_batch(texts);
  CHECK(b.rows == 3);
  CHECK(b.columns == 6);
  CHECK(b.lengths == std::vector<std::int64_t>{3, 6, 4});
  CHECK(b.ids == std::vector<std::int64_t>{2, 5, 3, 0, 0, 0, 2, 9, 10, 11, 25, 3, 2, 25, 26, 3, 0, 0});
  CHECK(b.attention_mask == std::vector<std::uint8_t>{1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0});
  const TokenBatch empty = tok.encode_batch({});
  CHECK(empty.rows == 0);
  CHECK(empty.ids.empty());
}

TEST_CASE("tokenizer: arbitrary bytes give bounded, valid ids", "[infer][encoder]") {
  const WordPieceTokenizer tok = tokenizer({.max_length = 24});
  std::mt19937 rng(15);
  // Bytes drawn from ASCII letters and punctuation, UTF-8 lead and continuation bytes, and anything.
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz THE.,!$\t\n\x80\xBF\xC3\xA9\xE4\xB8\xAD\xF0\x9F\xFF";
  for (int i = 0; i < 1500; ++i) {
    std::string text(rng() % 48, '\0');
    for (char& c : text) c = rng() % 4 == 0 ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
    INFO("text bytes " << text.size() << " round " << i);
    const std::vector<std::int64_t> ids = tok.encode(text);
    REQUIRE(ids.size() >= 2);
    REQUIRE(ids.size() <= 24);
    REQUIRE(ids.front() == tok.cls_id());
    REQUIRE(ids.back() == tok.sep_id());
    for (std::int64_t id : ids) REQUIRE((id >= 0 && id < tok.vocab_size()));
    const std::string normal = tok.normalize(text);  // well-formed UTF-8: it tokenizes the same
    REQUIRE(tok.tokenize(normal) == tok.tokenize(text));
  }
}

TEST_CASE("tokenizer: vocabulary files and bad vocabularies", "[infer][encoder]") {
  TestContext ctx;
  ModelDir dir(ctx);
  write_text(dir / "crlf.txt", "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nthe\r\n");
  const WordPieceTokenizer tok = WordPieceTokenizer::from_file(dir / "crlf.txt");
  CHECK(tok.vocab_size() == 5);
  CHECK(tok.token_to_id("the") == 4);
  CHECK(tok.id_to_token(4) == "the");
  CHECK(tok.token_to_id("dog") == -1);
  FORGE_REQUIRE_ERROR(out_of_range, "wordpiece", tok.id_to_token(5));
  FORGE_REQUIRE_ERROR(io, "wordpiece", WordPieceTokenizer::from_file(dir / "absent.txt"));
  write_text(dir / "nosep.txt", "[PAD]\n[UNK]\n[CLS]\nthe\n");
  const std::string msg = FORGE_REQUIRE_ERROR(io, "wordpiece", WordPieceTokenizer::from_file(dir / "nosep.txt"));
  CHECK(msg.find("[SEP]") != std::string::npos);
  write_text(dir / "repeat.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nthe\n");
  FORGE_REQUIRE_ERROR(io, "wordpiece", WordPieceTokenizer::from_file(dir / "repeat.txt"));
  FORGE_REQUIRE_ERROR(invalid_argument, "wordpiece", WordPieceTokenizer(kVocab, {.max_length = 1}));
}

// ---------------------------------------------------------------------------
// The encoder

TEST_CASE("encoder: embeddings of a tiny BERT match a float64 forward pass", "[infer][encoder]") {
  TestContext ctx;
  const Tiny m;
  ModelDir dir(ctx, m);
  const SentenceEncoder enc = SentenceEncoder::load(ctx, dir.path());
  CHECK(enc.dimension() == m.hidden);
  CHECK(enc.tokenizer().options().max_length == 12);  // from sentence_bert_config.json
  CHECK(enc.owned_weight_bytes() == 0);               // f32 weights are used in place
  Arena arena{ctx};
  const RowsView rows = enc.embed(arena, kSentences);
  REQUIRE(rows.count() == 3);
  REQUIRE(rows.columns() == m.hidden);
  CHECK(rows.dtype() == DType::f32);
  for (std::int64_t r = 0; r < 3; ++r) {
    const std::vector<std::int64_t> ids = enc.tokenizer().encode(kSentences[static_cast<std::size_t>(r)]);
    const std::vector<double> want = reference_embedding(dir.weights, m, ids);
    INFO("sentence " << r);
    CHECK(max_abs_diff(row_of(rows, r), want) < 2e-5);
  }
  // The three differ (a mask or position mix-up could make them collapse).
  const std::vector<float> second = row_of(rows, 1);
  CHECK(max_abs_diff(row_of(rows, 0), std::vector<double>(second.begin(), second.end())) > 0.05);
}

TEST_CASE("encoder: a sentence embedded alone equals it embedded among longer ones", "[infer][encoder]") {
  TestContext ctx;
  ModelDir dir(ctx);
  const SentenceEncoder enc = SentenceEncoder::load(ctx, dir.path());
  Arena arena{ctx};
  const std::vector<float> alone = row_of(enc.embed(arena, Strings{"the dog"}), 0);
  const RowsView batch = enc.embed(arena, Strings{"unaffable dogs run fast, hello world", "the dog", "cafe !"});
  const std::vector<float> padded = row_of(batch, 1);
  CHECK(max_abs_diff(padded, std::vector<double>(alone.begin(), alone.end())) < 1e-6);
  // Truncation: a sentence over max_seq_length (12) embeds as its first 10 pieces.
  const std::string longer = "the dog runs fast the dog runs fast the dog runs fast";
  const std::string cut = "the dog runs fast the dog runs fast the dog";
  const std::vector<float> a = row_of(enc.embed(arena, Strings{longer}), 0);
  const std::vector<float> b = row_of(enc.embed(arena, Strings{cut}), 0);
  CHECK(max_abs_diff(a, std::vector<double>(b.begin(), b.end())) < 1e-6);
}

TEST_CASE("encoder: CLS pooling, no normalization, a bert. prefix and bf16 weights", "[infer][encoder]") {
  TestContext ctx;
  const Tiny m;
  SECTION("1_Pooling/config.json and modules.json choose CLS pooling without normalization") {
    ModelDir dir(ctx, m);
    write_text(dir / "1_Pooling" / "config.json",
               "{\"word_embedding_dimension\": 32, \"pooling_mode_cls_token\": true, "
               "\"pooling_mode_mean_tokens\": false}");
    write_text(dir / "modules.json",
               "[{\"idx\": 0, \"type\": \"sentence_transformers.models.Transformer\"}, "
               "{\"idx\": 1, \"type\": \"sentence_transformers.models.Pooling\"}]");
    const SentenceEncoder enc = SentenceEncoder::load(ctx, dir.path());
    Arena arena{ctx};
    const RowsView rows = enc.embed(arena, kSentences);
    for (std::int64_t r = 0; r < 3; ++r) {
      const std::vector<std::int64_t> ids = enc.tokenizer().encode(kSentences[static_cast<std::size_t>(r)]);
      CHECK(max_abs_diff(row_of(rows, r), reference_embedding(dir.weights, m, ids, false, false)) < 5e-5);
    }
  }
  SECTION("a bert.-prefixed checkpoint") {
    ModelDir dir(ctx, m, "bert.");
    const SentenceEncoder enc = SentenceEncoder::load(ctx, dir.path());
    Arena arena{ctx};
    StateDict plain;
    for (const auto& [name, t] : dir.weights) plain[name.substr(5)] = t;
    const RowsView rows = enc.embed(arena, kSentences);
    CHECK(max_abs_diff(row_of(rows, 1), reference_embedding(plain, m, enc.tokenizer().encode(kSentences[1]))) < 2e-5);
  }
  SECTION("bf16 weights are converted once into memory the encoder owns") {
    ModelDir dir(ctx, m);
    StateDict half;
    for (const auto& [name, t] : dir.weights) half[name] = t.to(DType::bf16);
    forge::io::save_safetensors(dir / "model.safetensors", half);
    StateDict widened;  // the reference sees the same rounded values
    for (const auto& [name, t] : half) widened[name] = t.to(DType::f32);
    const SentenceEncoder enc = SentenceEncoder::load(ctx, dir.path());
    CHECK(enc.owned_weight_bytes() == enc.weight_bytes());
    Arena arena{ctx};
    const RowsView rows = enc.embed(arena, kSentences);
    CHECK(max_abs_diff(row_of(rows, 2), reference_embedding(widened, m, enc.tokenizer().encode(kSentences[2]))) < 2e-5);
  }
}

TEST_CASE("encoder: embed is an arena call: stale after the next call, nothing left by a failure", "[infer][encoder]") {
  TestContext ctx;
  ModelDir dir(ctx);
  const SentenceEncoder enc = SentenceEncoder::load(ctx, dir.path());
  Arena arena{ctx};
  const RowsView first = enc.embed(arena, kSentences);
  const std::vector<float> kept = row_of(first, 0);
  const RowsView second = enc.embed(arena, Strings{"the dog"});
  FORGE_REQUIRE_ERROR(stale_output, "RowsView", first.data());
  CHECK(second.count() == 1);
  CHECK(row_of(second, 0) != kept);
  const std::int64_t baseline = ctx.pool().outstanding();
  {  // refused before it touches the arena: the outputs stay
    TestContext other;
    Arena foreign{other};
    FORGE_REQUIRE_ERROR(device, "encoder.embed", enc.embed(foreign, kSentences));
    CHECK(second.count() == 1);
    CHECK(second.data() != nullptr);
  }

  SECTION("an id outside the vocabulary") {
    TokenBatch bad = enc.tokenizer().encode_batch(Strings{"the dog"});
    bad.ids[1] = 999;
    FORGE_REQUIRE_ERROR(out_of_range, "embedding", enc.embed(arena, bad));
  }
  SECTION("a row without tokens") {
    TokenBatch bad = enc.tokenizer().encode_batch(Strings{"the", "dog"});
    std::fill_n(bad.attention_mask.begin() + bad.columns, bad.columns, std::uint8_t{0});
    FORGE_REQUIRE_ERROR(invalid_argument, "encoder.embed", enc.embed(arena, bad));
  }
  SECTION("a batch wider than the positions") {
    TokenBatch bad;
    bad.rows = 1;
    bad.columns = 17;
    bad.ids.assign(17, 5);
    bad.attention_mask.assign(17, 1);
    FORGE_REQUIRE_ERROR(invalid_argument, "encoder.embed", enc.embed(arena, bad));
  }
  SECTION("the arena cannot grow") {
    arena.fail_growth_after(1);
    const Strings many(40, "hello world");  // outgrows the chunk the earlier calls left
    FORGE_REQUIRE_ERROR(out_of_memory, "encoder.embed", enc.embed(arena, many));
  }
  // The failed call rewound the arena: the last good outputs are stale, the pool is back, the arena serves again.
  FORGE_REQUIRE_ERROR(stale_output, "RowsView", second.data());
  CHECK(ctx.pool().outstanding() == baseline);
  const RowsView again = enc.embed(arena, Strings{});
  CHECK(again.count() == 0);
  CHECK(again.columns() == 32);
  CHECK(row_of(enc.embed(arena, kSentences), 0) == kept);
}

TEST_CASE("encoder: a steady loop of embed calls takes no memory from the system", "[infer][encoder]") {
  TestContext ctx;
  ModelDir dir(ctx);
  const SentenceEncoder enc = SentenceEncoder::load(ctx, dir.path());
  Arena arena{ctx};
  const std::int64_t outstanding = ctx.pool().outstanding();  // the test's own weights
  (void)enc.embed(arena, kSentences);
  const std::uint64_t pool_before = ctx.stats().system_allocations;
  const std::uint64_t arena_before = arena.stats().system_allocations;
  for (int i = 0; i < 5; ++i) (void)enc.embed(arena, kSentences);
  CHECK(ctx.stats().system_allocations == pool_before);
  CHECK(arena.stats().system_allocations == arena_before);
  CHECK(ctx.pool().outstanding() == outstanding);  // nothing of the pass outlives the call
}

TEST_CASE("encoder: load refuses missing or damaged files", "[infer][encoder]") {
  TestContext ctx;
  ModelDir dir(ctx);
  SECTION("no model.safetensors") {
    fs::remove(dir / "model.safetensors");
    FORGE_REQUIRE_ERROR(io, "load_safetensors", SentenceEncoder::load(ctx, dir.path()));
  }
  SECTION("a truncated model.safetensors") {
    fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") - 100);
    FORGE_REQUIRE_ERROR(io, "load_safetensors", SentenceEncoder::load(ctx, dir.path()));
  }
  SECTION("a checkpoint without a tensor") {
    StateDict w = dir.weights;
    w.erase("encoder.layer.1.output.dense.bias");
    forge::io::save_safetensors(dir / "model.safetensors", w);
    const std::string msg = FORGE_REQUIRE_ERROR(io, "encoder.load", SentenceEncoder::load(ctx, dir.path()));
    CHECK(msg.find("encoder.layer.1.output.dense.bias") != std::string::npos);
  }
  SECTION("no config.json") {
    fs::remove(dir / "config.json");
    FORGE_REQUIRE_ERROR(io, "encoder.load", SentenceEncoder::load(ctx, dir.path()));
  }
  SECTION("config.json that is not JSON") {
    write_text(dir / "config.json", "{\"hidden_size\": 32,");
    FORGE_REQUIRE_ERROR(io, "encoder.load", SentenceEncoder::load(ctx, dir.path()));
  }
  SECTION("config.json without a size") {
    write_text(dir / "config.json", "{\"vocab_size\": 30, \"hidden_size\": 32}");
    const std::string msg = FORGE_REQUIRE_ERROR(io, "encoder.load", SentenceEncoder::load(ctx, dir.path()));
    CHECK(msg.find("num_hidden_layers") != std::string::npos);
  }
  SECTION("no vocab.txt") {
    fs::remove(dir / "vocab.txt");
    FORGE_REQUIRE_ERROR(io, "wordpiece", SentenceEncoder::load(ctx, dir.path()));
  }
  SECTION("an architecture it does not run") {
    std::string text = config_json(Tiny{});
    text.replace(text.find("\"bert\""), 6, "\"roberta\"");
    write_text(dir / "config.json", text);
    FORGE_REQUIRE_ERROR(not_implemented, "encoder.load", SentenceEncoder::load(ctx, dir.path()));
  }
}

TEST_CASE("encoder: load refuses a config whose sizes disagree with the tensors", "[infer][encoder]") {
  TestContext ctx;
  ModelDir dir(ctx);
  struct Case {
    const char* what;
    void (*edit)(Tiny&);
    forge::ErrorCode code;
    const char* named;  // in the message
  };
  const Case cases[] = {
      {"hidden size", [](Tiny& m) { m.hidden = 48; }, forge::ErrorCode::shape, "embeddings.word_embeddings.weight"},
      {"intermediate size", [](Tiny& m) { m.inner = 128; }, forge::ErrorCode::shape, "intermediate.dense.weight"},
      {"fewer layers than the checkpoint", [](Tiny& m) { m.layers = 1; }, forge::ErrorCode::shape, "layers"},
      {"more layers than the checkpoint", [](Tiny& m) { m.layers = 3; }, forge::ErrorCode::io, "encoder.layer.2."},
      {"a vocabulary of another size", [](Tiny& m) { m.vocab = 31; }, forge::ErrorCode::shape, "vocab_size"},
      {"heads that do not divide hidden", [](Tiny& m) { m.heads = 5; }, forge::ErrorCode::io, "num_attention_heads"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Tiny m;
    c.edit(m);
    write_text(dir / "config.json", config_json(m));
    try {
      (void)SentenceEncoder::load(ctx, dir.path());
      FAIL("loaded");
    } catch (const forge::Error& e) {
      CHECK(e.code() == c.code);
      CHECK(std::string(e.what()).rfind("[encoder.load]", 0) == 0);
      CHECK(std::string(e.what()).find(c.named) != std::string::npos);
    }
  }
  write_text(dir / "config.json", config_json(Tiny{}));
  write_text(dir / "sentence_bert_config.json", "{\"max_seq_length\": 17}");  // past the 16 positions
  FORGE_REQUIRE_ERROR(io, "encoder.load", SentenceEncoder::load(ctx, dir.path()));
}
