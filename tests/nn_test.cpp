// forge::nn: modules against the functional ops, registration and names,
// train/eval, dtype conversion, state dicts, initializers and module-level
// gradient checks.

#include "forge/nn.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "forge/optim.h"
#include "support.h"

using namespace forge;
using forge_test::TestContext;

namespace {

// Bitwise equality of two tensors' values (same shape and dtype).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor pa = a.contiguous(), pb = b.contiguous();
  return std::memcmp(pa.raw_data(), pb.raw_data(), pa.nbytes()) == 0;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }

double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / v.size());
}

// A module with a buffer, for the traversal and state-dict tests.
class Scaled : public nn::Module {
 public:
  explicit Scaled(ExecContext& ctx) {
    fc = register_module("fc", std::make_shared<nn::Linear>(ctx, 3, 2));
    register_buffer("scale", ctx.full({2}, 2.0));
    register_buffer("steps", ctx.zeros({1}, DType::i64));
  }
  Tensor forward(const Tensor& x) override { return fc->forward(x) * buffer("scale"); }
  std::shared_ptr<nn::Linear> fc;
};

std::shared_ptr<nn::Sequential> small_mlp(ExecContext& ctx) {
  auto inner = std::make_shared<nn::Sequential>(ctx);
  inner->push_back(std::make_shared<nn::Linear>(ctx, 5, 4));
  inner->push_back(std::make_shared<nn::LayerNorm>(ctx, 4));
  auto net = std::make_shared<nn::Sequential>(ctx);
  net->push_back(std::make_shared<nn::Linear>(ctx, 3, 5));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(inner);
  return net;
}

}  // namespace

TEST_CASE("nn: Linear equals forge::linear with its own weight and bias") {
  TestContext ctx;
  auto fc = std::make_shared<nn::Linear>(ctx, 4, 3);
  const Tensor x = ctx.randn({2, 5, 4});
  const Tensor y = fc->forward(x);
  CHECK(y.shape() == Shape{2, 5, 3});
  CHECK(same_bits(y, linear(x, fc->weight(), fc->bias())));
  CHECK(fc->weight().shape() == Shape{3, 4});
  CHECK(fc->weight().requires_grad());

  auto nobias = std::make_shared<nn::Linear>(ctx, 4, 3, false);
  CHECK_FALSE(nobias->bias().defined());
  CHECK(nobias->named_parameters().size() == 1);
  CHECK(same_bits((*nobias)(x), linear(x, nobias->weight())));
  FORGE_REQUIRE_ERROR(invalid_argument, "nn.Linear", nn::Linear(ctx, 0, 3));
  FORGE_REQUIRE_ERROR(shape, "linear", fc->forward(ctx.randn({2, 5})));
}

TEST_CASE("nn: layers equal the functional ops they wrap") {
  TestContext ctx;
  const Tensor img = ctx.randn({2, 3, 8, 8});
  auto conv = std::make_shared<nn::Conv2d>(ctx, 3, 4, 3, nn::Conv2dOptions{.stride = 2, .padding = {1, 0}});
  CHECK(conv->weight().shape() == Shape{4, 3, 3, 3});
  CHECK(
      same_bits(conv->forward(img), conv2d(img, conv->weight(), conv->bias(), {.stride = {2, 2}, .padding = {1, 0}})));
  FORGE_REQUIRE_ERROR(invalid_argument, "nn.Conv2d", nn::Conv2d(ctx, 3, 4, 3, {.groups = 2}));

  auto pool = std::make_shared<nn::MaxPool2d>(2);
  CHECK(same_bits(pool->forward(img), max_pool2d(img, {.kernel = {2, 2}})));
  CHECK(nn::Flatten().forward(img).shape() == Shape{2, 192});

  auto ln = std::make_shared<nn::LayerNorm>(ctx, Shape{8, 8});
  CHECK(same_bits(ln->forward(img), layer_norm(img, {8, 8}, ctx.ones({8, 8}), ctx.zeros({8, 8}))));
  auto rms = std::make_shared<nn::RMSNorm>(ctx, 8, 1e-6);
  CHECK(same_bits(rms->forward(img), rms_norm(img, {8}, ctx.ones({8}), 1e-6)));

  auto emb = std::make_shared<nn::Embedding>(ctx, 10, 4);
  const Tensor idx = ctx.from_vector<std::int64_t>({3, 0, 9, 3}, {2, 2});
  const Tensor e = emb->forward(idx);
  CHECK(e.shape() == Shape{2, 2, 4});
  CHECK(same_bits(e.select(0, 0).select(0, 0), emb->weight().select(0, 3)));
  FORGE_REQUIRE_ERROR(out_of_range, "embedding", emb->forward(ctx.from_vector<std::int64_t>({10})));

  const Tensor v = ctx.randn({4, 6});
  CHECK(same_bits(nn::GELU().forward(v), gelu(v)));
  CHECK(same_bits(nn::SiLU().forward(v), silu(v)));
  CHECK(same_bits(nn::ReLU().forward(v), relu(v)));
}

TEST_CASE("nn: Embedding's padding row starts at zeros and gets no gradient, as in libtorch") {
  TestContext ctx;
  nn::Embedding emb(ctx, 5, 3, -2);  // row 3
  REQUIRE(emb.padding_idx() == std::optional<std::int64_t>(3));
  CHECK(emb.weight().select(0, 3).to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(emb.weight().select(0, 2).abs().sum().item<double>() > 0);
  const Tensor idx = ctx.from_vector<std::int64_t>({3, 4, 3, 1}, {4});
  emb.forward(idx).sum().backward();
  const auto g = emb.weight().grad().to_vector<double>();
  const std::vector<double> want = {0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1};
  CHECK(g == want);
  CHECK(nn::Embedding(ctx, 5, 3).padding_idx() == std::nullopt);
  FORGE_REQUIRE_ERROR(out_of_range, "nn.Embedding", nn::Embedding(ctx, 5, 3, 5));
  FORGE_REQUIRE_ERROR(out_of_range, "nn.Embedding", nn::Embedding(ctx, 5, 3, -6));
}

TEST_CASE("nn: building modules takes nothing from the pool") {
  TestContext ctx;
  const PoolStats before = ctx.stats();
  {
    auto block = std::make_shared<nn::TransformerBlock>(ctx, 8, 2);
    auto conv = std::make_shared<nn::Conv2d>(ctx, 3, 4, 3);
    const PoolStats during = ctx.stats();
    CHECK(during.outstanding == before.outstanding);
    CHECK(during.live_bytes == before.live_bytes);
    for (const Tensor& p : block->parameters()) CHECK_FALSE(p.buffer()->pooled());
    for (const Tensor& p : conv->parameters()) {
      CHECK_FALSE(p.buffer()->pooled());
      CHECK(reinterpret_cast<std::uintptr_t>(p.raw_data()) % 64 == 0);
    }
    block->to(DType::f64);
    CHECK(ctx.stats().outstanding == before.outstanding);
    for (const Tensor& p : block->parameters()) CHECK_FALSE(p.buffer()->pooled());
  }
  CHECK(ctx.stats().outstanding == before.outstanding);
}

TEST_CASE("nn: register_parameter copies a pooled tensor into module-owned memory") {
  TestContext ctx;
  nn::Module m;
  const Tensor src = ctx.randn({3, 2});
  const Tensor p = m.register_parameter("w", src);
  CHECK_FALSE(p.buffer()->pooled());
  CHECK(same_bits(p, src));
  CHECK(p.requires_grad());
  CHECK(p.is_same(m.named_parameters().at(0).second));
  const Tensor frozen = m.register_parameter("frozen", ctx.ones({2}), false);
  CHECK_FALSE(frozen.requires_grad());

  FORGE_REQUIRE_ERROR(invalid_argument, "nn.register_parameter", m.register_parameter("w", ctx.ones({1})));
  FORGE_REQUIRE_ERROR(invalid_argument, "nn.register_parameter", m.register_parameter("a.b", ctx.ones({1})));
  FORGE_REQUIRE_ERROR(invalid_argument, "nn.register_buffer", m.register_buffer("", ctx.ones({1})));
  FORGE_REQUIRE_ERROR(dtype, "nn.register_parameter", m.register_parameter("i", ctx.zeros({1}, DType::i64)));
  FORGE_REQUIRE_ERROR(invalid_argument, "nn.register_module", m.register_module("w", std::make_shared<nn::ReLU>()));
  FORGE_REQUIRE_ERROR(not_implemented, "nn.forward", m.forward(src));
  CHECK(m.named_parameters().size() == 2);
}

TEST_CASE("nn: named_parameters gives dotted names in registration order through nested Sequential") {
  TestContext ctx;
  auto net = small_mlp(ctx);
  std::vector<std::string> names;
  for (const auto& [name, t] : net->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.0.weight", "2.0.bias", "2.1.weight", "2.1.bias"});
  CHECK(net->parameters().size() == 6);
  CHECK(net->parameters().at(2).is_same(
      std::static_pointer_cast<nn::Linear>(std::static_pointer_cast<nn::Sequential>(net->at(2))->at(0))->weight()));
  CHECK(net->named_parameters(false).empty());
  CHECK(net->children().size() == 3);
  FORGE_REQUIRE_ERROR(out_of_range, "nn.Sequential", net->at(3));
  CHECK(net->forward(ctx.randn({2, 3})).shape() == Shape{2, 4});

  auto s = std::make_shared<Scaled>(ctx);
  std::vector<std::string> buffers;
  for (const auto& [name, t] : s->named_buffers()) buffers.push_back(name);
  CHECK(buffers == std::vector<std::string>{"scale", "steps"});
  const StateDict sd = s->state_dict();
  CHECK(sd.size() == 4);
  CHECK(sd.count("fc.weight") == 1);
  CHECK(sd.count("steps") == 1);

  auto block = std::make_shared<nn::TransformerBlock>(ctx, 8, 2);
  names.clear();
  for (const auto& [name, t] : block->named_parameters()) names.push_back(name);
  CHECK(names.size() == 16);
  CHECK(names.front() == "ln1.weight");
  CHECK(names[2] == "attn.q_proj.weight");
  CHECK(names.back() == "mlp.2.bias");
}

TEST_CASE("nn: train and eval switch Dropout through the module tree") {
  TestContext ctx;
  auto drop = std::make_shared<nn::Dropout>(0.5);
  auto net = std::make_shared<nn::Sequential>(ctx);
  net->push_back(std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{drop}));
  const Tensor x = ctx.ones({64, 64});
  CHECK(net->is_training());
  const auto trained = net->forward(x).to_vector<float>();
  const auto zeros = std::count(trained.begin(), trained.end(), 0.0f);
  CHECK(zeros > 1500);
  CHECK(zeros < 2600);
  CHECK(std::count(trained.begin(), trained.end(), 2.0f) == static_cast<long>(trained.size()) - zeros);

  net->eval();
  CHECK_FALSE(drop->is_training());
  CHECK(same_bits(net->forward(x), x));
  net->train();
  CHECK(drop->is_training());
  FORGE_REQUIRE_ERROR(invalid_argument, "nn.Dropout", nn::Dropout(1.5));
}

TEST_CASE("nn: to(f64) converts parameters and floating buffers and keeps requires_grad") {
  TestContext ctx;
  auto s = std::make_shared<Scaled>(ctx);
  s->register_parameter("frozen", ctx.ones({2}), false);
  const Tensor x = ctx.randn({4, 3});
  const Tensor y32 = s->forward(x);
  const Tensor w32 = s->fc->weight();
  s->to(DType::f64);
  for (const auto& [name, p] : s->named_parameters()) {
    INFO(name);
    CHECK(p.dtype() == DType::f64);
    CHECK(p.requires_grad() == (name != "frozen"));
  }
  CHECK(s->named_buffers().at(0).second.dtype() == DType::f64);
  CHECK(s->named_buffers().at(1).second.dtype() == DType::i64);  // integer buffers stay
  CHECK(same_bits(s->fc->weight(), w32.to(DType::f64)));
  const Tensor y64 = s->forward(x.to(DType::f64));
  CHECK(y64.dtype() == DType::f64);
  CHECK(max_abs_diff(y64, y32) < 1e-5);

  s->to(Device::cpu());
  const std::string msg = FORGE_REQUIRE_ERROR(device, "nn.to", s->to(Device::cuda(0)));
  CHECK(msg.find("Module") != std::string::npos);
  const std::string msg2 = FORGE_REQUIRE_ERROR(device, "nn.to", s->fc->to(Device::cuda(0)));
  CHECK(msg2.find("Linear") != std::string::npos);
  FORGE_REQUIRE_ERROR(dtype, "nn.to", s->to(DType::i32));
  CHECK(s->fc->weight().dtype() == DType::f64);
}

TEST_CASE("nn: state_dict round trip into a fresh model is bit exact and keeps the parameter handles") {
  TestContext ctx;
  ctx.manual_seed(1);
  auto a = small_mlp(ctx);
  ctx.manual_seed(2);
  auto b = small_mlp(ctx);
  const Tensor x = ctx.randn({4, 3});
  CHECK_FALSE(same_bits(a->forward(x), b->forward(x)));

  const std::vector<Tensor> handles = b->parameters();
  b->load_state_dict(a->state_dict());
  CHECK(same_bits(a->forward(x), b->forward(x)));
  const std::vector<Tensor> after = b->parameters();
  for (std::size_t i = 0; i < handles.size(); ++i) {
    CHECK(after[i].is_same(handles[i]));
    CHECK(after[i].requires_grad());
    CHECK(after[i].is_leaf());
  }
  // The loaded values are copies: changing the source afterwards leaves b alone.
  const Tensor before = b->forward(x);
  {
    autograd::NoGradGuard no_grad;
    a->parameters().at(0).add_(1.0);
  }
  CHECK(same_bits(b->forward(x), before));
}

TEST_CASE("nn: strict load_state_dict refuses missing, unexpected and mismatched entries and writes nothing") {
  TestContext ctx;
  auto s = std::make_shared<Scaled>(ctx);
  const StateDict good = std::make_shared<Scaled>(ctx)->state_dict();
  const StateDict original = [&] {
    StateDict copy;
    for (const auto& [k, v] : s->state_dict()) copy.emplace(k, v.clone());
    return copy;
  }();
  const auto unchanged = [&] {
    for (const auto& [k, v] : s->state_dict())
      if (!same_bits(v, original.at(k))) return false;
    return true;
  };
  StateDict missing = good;
  missing.erase("fc.bias");
  StateDict unexpected = good;
  unexpected.emplace("fc.extra", ctx.ones({1}));
  StateDict wrong_shape = good;
  wrong_shape["fc.weight"] = ctx.ones({3, 2});
  StateDict wrong_dtype = good;
  wrong_dtype["scale"] = ctx.full({2}, 3.0, DType::f64);
  const auto stats = ctx.stats();

  std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "nn.load_state_dict", s->load_state_dict(missing));
  CHECK(msg.find("fc.bias") != std::string::npos);
  msg = FORGE_REQUIRE_ERROR(invalid_argument, "nn.load_state_dict", s->load_state_dict(unexpected));
  CHECK(msg.find("fc.extra") != std::string::npos);
  msg = FORGE_REQUIRE_ERROR(shape, "nn.load_state_dict", s->load_state_dict(wrong_shape));
  CHECK(msg.find("fc.weight") != std::string::npos);
  FORGE_REQUIRE_ERROR(shape, "nn.load_state_dict", s->load_state_dict(wrong_shape, false));
  msg = FORGE_REQUIRE_ERROR(dtype, "nn.load_state_dict", s->load_state_dict(wrong_dtype));
  CHECK(msg.find("scale") != std::string::npos);
  CHECK(unchanged());
  CHECK(ctx.stats().outstanding == stats.outstanding);

  // Not strict: keys on one side only are skipped, dtypes converted.
  missing.emplace("fc.extra", ctx.ones({1}));
  missing["scale"] = ctx.full({2}, 3.0, DType::f64);
  s->load_state_dict(missing, false);
  CHECK(same_bits(s->state_dict().at("fc.weight"), good.at("fc.weight")));
  CHECK(same_bits(s->state_dict().at("fc.bias"), original.at("fc.bias")));
  CHECK(s->state_dict().at("scale").to_vector<float>() == std::vector<float>{3.0f, 3.0f});
}

TEST_CASE("nn: initializers draw the documented distributions") {
  TestContext ctx;
  const Tensor w = ctx.empty({256, 128});  // fan_in 128, fan_out 256
  const auto values = [&] { return w.to_vector<double>(); };
  const auto bounds = [&](double lo, double hi) {
    const auto v = values();
    return *std::min_element(v.begin(), v.end()) >= lo && *std::max_element(v.begin(), v.end()) <= hi;
  };

  nn::init::uniform_(w, -2, 3);
  CHECK(bounds(-2, 3));
  CHECK(mean_of(values()) == Approx(0.5).margin(0.05));
  nn::init::normal_(w, 1.0, 0.5);
  CHECK(mean_of(values()) == Approx(1.0).margin(0.01));
  CHECK(std_of(values()) == Approx(0.5).epsilon(0.02));

  const double kaiming_bound = std::sqrt(2.0) * std::sqrt(3.0 / 128);  // relu gain, fan_in
  nn::init::kaiming_uniform_(w, 0.0, nn::init::FanMode::fan_in, nn::init::Nonlinearity::relu);
  CHECK(bounds(-kaiming_bound, kaiming_bound));
  CHECK(std_of(values()) == Approx(kaiming_bound / std::sqrt(3.0)).epsilon(0.02));
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::fan_out, nn::init::Nonlinearity::relu);
  CHECK(std_of(values()) == Approx(std::sqrt(2.0 / 256)).epsilon(0.02));

  const double xavier_bound = std::sqrt(6.0 / (128 + 256));
  nn::init::xavier_uniform_(w);
  CHECK(bounds(-xavier_bound, xavier_bound));
  CHECK(std_of(values()) == Approx(xavier_bound / std::sqrt(3.0)).epsilon(0.02));
  nn::init::xavier_normal_(w, 2.0);
  CHECK(std_of(values()) == Approx(2.0 * std::sqrt(2.0 / 384)).epsilon(0.02));
  CHECK(mean_of(values()) == Approx(0.0).margin(0.01));

  nn::init::zeros_(w);
  CHECK(bounds(0, 0));
  nn::init::ones_(w);
  CHECK(bounds(1, 1));

  // libtorch's Linear default: weight and bias within ±1/sqrt(in_features).
  auto fc = std::make_shared<nn::Linear>(ctx, 64, 300);
  const double b = 1.0 / 8.0;
  for (const Tensor& p : fc->parameters()) {
    const auto v = p.to_vector<double>();
    CHECK(*std::max_element(v.begin(), v.end()) <= b);
    CHECK(*std::min_element(v.begin(), v.end()) >= -b);
    CHECK(*std::max_element(v.begin(), v.end()) > 0.9 * b);
  }

  FORGE_REQUIRE_ERROR(invalid_argument, "nn.init.kaiming_uniform_", nn::init::kaiming_uniform_(ctx.empty({4})));
  FORGE_REQUIRE_ERROR(dtype, "nn.init.normal_", nn::init::normal_(ctx.zeros({4}, DType::i32)));
  FORGE_REQUIRE_ERROR(invalid_argument, "nn.init.uniform_", nn::init::uniform_(w, 1, 0));
}

TEST_CASE("nn: manual_seed replays initializers and module construction") {
  TestContext ctx;
  const Tensor a = ctx.empty({5, 7}, DType::f64), b = ctx.empty({5, 7}, DType::f64);
  ctx.manual_seed(42);
  nn::init::kaiming_normal_(a);
  ctx.manual_seed(42);
  nn::init::kaiming_normal_(b);
  CHECK(same_bits(a, b));
  nn::init::kaiming_normal_(b);
  CHECK_FALSE(same_bits(a, b));

  // A transposed view draws the same row-major values as a packed tensor.
  const Tensor packed = ctx.empty({7, 5}, DType::f32), base = ctx.empty({5, 7}, DType::f32);
  ctx.manual_seed(3);
  nn::init::uniform_(packed);
  ctx.manual_seed(3);
  nn::init::uniform_(base.t());
  CHECK(same_bits(base.t(), packed));

  ctx.manual_seed(9);
  auto m1 = small_mlp(ctx);
  ctx.manual_seed(9);
  auto m2 = small_mlp(ctx);
  const auto p1 = m1->parameters(), p2 = m2->parameters();
  for (std::size_t i = 0; i < p1.size(); ++i) CHECK(same_bits(p1[i], p2[i]));
}

TEST_CASE("nn: MultiheadAttention equals per-head attention written with matmul and softmax") {
  TestContext ctx;
  const std::int64_t E = 8, H = 2, D = 4, B = 2, L = 3, S = 5;
  for (bool causal : {false, true}) {
    auto mha = std::make_shared<nn::MultiheadAttention>(ctx, E, H, nn::MultiheadAttentionOptions{.causal = causal});
    for (const auto& p : {mha->q_proj(), mha->k_proj(), mha->v_proj(), mha->out_proj()}) nn::init::normal_(p->bias());
    const Tensor q = ctx.randn({B, L, E}), kv = ctx.randn({B, S, E});
    const Tensor out = mha->forward(q, kv, kv);
    CHECK(out.shape() == Shape{B, L, E});

    const Tensor qp = mha->q_proj()->forward(q), kp = mha->k_proj()->forward(kv), vp = mha->v_proj()->forward(kv);
    std::vector<Tensor> heads;
    for (std::int64_t h = 0; h < H; ++h) {
      Tensor scores = matmul(qp.narrow(2, h * D, D), kp.narrow(2, h * D, D).transpose(1, 2)) / std::sqrt(double(D));
      if (causal) scores = scores.masked_fill(ctx.ones({L, S}, DType::boolean).triu(1), -INFINITY);
      heads.push_back(matmul(softmax(scores, -1), vp.narrow(2, h * D, D)));
    }
    const Tensor expected = mha->out_proj()->forward(cat(heads, 2));
    CHECK(max_abs_diff(out, expected) < 1e-5);

    // Unbatched input gives the batch's rows.
    CHECK(max_abs_diff(mha->forward(q.select(0, 1), kv.select(0, 1), kv.select(0, 1)), out.select(0, 1)) < 1e-5);
  }
  auto mha = std::make_shared<nn::MultiheadAttention>(ctx, E, H);
  const Tensor x = ctx.randn({B, L, E});
  // A boolean mask that keeps everything changes nothing.
  CHECK(max_abs_diff(mha->forward(x, x, x, ctx.ones({L, L}, DType::boolean)), mha->forward(x)) < 1e-6);
  FORGE_REQUIRE_ERROR(invalid_argument, "nn.MultiheadAttention", nn::MultiheadAttention(ctx, 6, 4));
  FORGE_REQUIRE_ERROR(shape, "nn.MultiheadAttention", mha->forward(ctx.randn({B, L, 4})));
  FORGE_REQUIRE_ERROR(shape, "nn.MultiheadAttention", mha->forward(x, ctx.randn({B, 2, E}), ctx.randn({B, 3, E})));
  FORGE_REQUIRE_ERROR(shape, "nn.MultiheadAttention", mha->forward(ctx.randn({E})));
}

TEST_CASE("nn: TransformerBlock is x + attn(ln1(x)) then h + mlp(ln2(h))") {
  TestContext ctx;
  auto block =
      std::make_shared<nn::TransformerBlock>(ctx, 8, 2, nn::TransformerBlockOptions{.mlp_hidden = 16, .causal = true});
  const Tensor x = ctx.randn({2, 4, 8});
  const Tensor y = block->forward(x);
  const Tensor h = x + block->attn()->forward(block->ln1()->forward(x));
  const Tensor expected = h + block->mlp()->forward(block->ln2()->forward(h));
  CHECK(same_bits(y, expected));
  CHECK(block->attn()->causal());
  // Causal: the first position ignores later ones.
  Tensor x2 = x.clone();
  x2.narrow(1, 1, 3).fill_(7.0);
  CHECK(max_abs_diff(block->forward(x2).narrow(1, 0, 1), y.narrow(1, 0, 1)) < 1e-6);
}

TEST_CASE("nn: gradcheck in f64 through Linear, Conv2d, LayerNorm and MultiheadAttention") {
  TestContext ctx;
  const auto check = [&](nn::Module& m, const Shape& in_shape, const Tensor& param) {
    m.to(DType::f64);
    const Tensor x = ctx.randn(in_shape, DType::f64).requires_grad_();
    const auto r1 = autograd::gradcheck([&](const std::vector<Tensor>& in) { return m.forward(in[0]); }, {x});
    INFO(m.type_name() << " input: " << r1.message);
    CHECK(r1.ok);
    const Tensor fixed = x.detach();
    const auto r2 = autograd::gradcheck([&](const std::vector<Tensor>&) { return m.forward(fixed); }, {param});
    INFO(m.type_name() << " parameter: " << r2.message);
    CHECK(r2.ok);
  };
  auto fc = std::make_shared<nn::Linear>(ctx, 3, 2);
  fc->to(DType::f64);
  check(*fc, {2, 3}, fc->weight());
  check(*fc, {2, 3}, fc->bias());

  auto conv = std::make_shared<nn::Conv2d>(ctx, 2, 2, 3, nn::Conv2dOptions{.padding = 1});
  conv->to(DType::f64);
  check(*conv, {1, 2, 4, 4}, conv->weight());

  auto ln = std::make_shared<nn::LayerNorm>(ctx, 4);
  ln->to(DType::f64);
  nn::init::normal_(ln->weight());
  nn::init::normal_(ln->bias());
  check(*ln, {3, 4}, ln->weight());

  auto mha = std::make_shared<nn::MultiheadAttention>(ctx, 4, 2, nn::MultiheadAttentionOptions{.causal = true});
  mha->to(DType::f64);
  check(*mha, {2, 3, 4}, mha->q_proj()->weight());
  check(*mha, {2, 3, 4}, mha->out_proj()->bias());
}

TEST_CASE("nn: Adam trains module parameters and keeps them across load_state_dict") {
  TestContext ctx;
  auto net = small_mlp(ctx);
  const Tensor x = ctx.randn({16, 3});
  const Tensor target = ctx.randn({16, 4});
  optim::Adam adam(net->parameters(), {.lr = 1e-2});
  const auto loss_of = [&] { return mse_loss(net->forward(x), target); };
  const double first = loss_of().item<float>();
  for (int step = 0; step < 30; ++step) {
    adam.zero_grad();
    loss_of().backward();
    adam.step();
  }
  CHECK(loss_of().item<float>() < 0.8 * first);

  // Loading writes into the tensors the optimizer holds, so its next step moves the loaded values.
  auto fresh = small_mlp(ctx);
  net->load_state_dict(fresh->state_dict());
  CHECK(same_bits(net->forward(x), fresh->forward(x)));
  net->zero_grad();
  loss_of().backward();
  CHECK(net->parameters().at(0).grad().defined());
  adam.step();
  CHECK_FALSE(same_bits(net->forward(x), fresh->forward(x)));
  net->zero_grad();
  CHECK_FALSE(net->parameters().at(0).grad().defined());
}

TEST_CASE("nn: to(dtype) needs the module's context to be the current one") {
  TestContext ctx;
  auto fc = std::make_shared<nn::Linear>(ctx, 2, 2);
  {
    TestContext other;
    FORGE_REQUIRE_ERROR(device, "nn.to", fc->to(DType::f64));
    CHECK(fc->weight().dtype() == DType::f32);
  }
  fc->to(DType::f64);
  CHECK(fc->weight().dtype() == DType::f64);
}

// Note [Worker scratch]: GEMMs on worker threads pack into scratch leased up
// front by the calling thread, so a warm step's acquires do not depend on how
// the scheduler spreads conv2d's and linear's work over the two threads.
TEST_CASE("nn: a scoped CNN training step on 2 threads takes no system memory after step 1") {
  TestContext ctx({.threads = 2, .seed = 21});
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(ctx, 1, 16, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(ctx, 16, 32, 3, nn::Conv2dOptions{.padding = 1}),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(ctx, 32 * 7 * 7, 10)});
  forge::optim::Adam adam(model->parameters(), {.lr = 1e-3});
  const Tensor x = ctx.randn({32, 1, 28, 28});
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  const Tensor y = ctx.from_vector(labels);
  const std::int64_t baseline = ctx.pool().outstanding();
  std::uint64_t after_first = 0;
  for (int step = 0; step < 12; ++step) {
    {
      auto scope = ctx.open_exec_scope();
      cross_entropy(model->forward(x), y).backward();
      adam.step();
      adam.zero_grad();
    }
    INFO("step " << step);
    REQUIRE(ctx.pool().outstanding() == baseline);
    if (step == 0) after_first = ctx.stats().system_allocations;
  }
  CHECK(ctx.stats().system_allocations == after_first);
}

namespace {

// A module with a ModuleList of blocks and a ModuleDict of heads.
struct Tower : nn::Module {
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::ModuleDict> heads;
  Tower(ExecContext& ctx) {
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    blocks->push_back(std::make_shared<nn::Linear>(ctx, 4, 4));
    blocks->push_back(std::make_shared<nn::ReLU>());
    blocks->push_back(std::make_shared<nn::Linear>(ctx, 4, 4, false));
    heads = register_module("heads", std::make_shared<nn::ModuleDict>());
    heads->insert("cls", std::make_shared<nn::Linear>(ctx, 4, 2));
    heads->insert("norm", std::make_shared<nn::LayerNorm>(ctx, 4));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const auto& b : *blocks) h = b->forward(h);
    return heads->at("cls")->forward(heads->at("norm")->forward(h));
  }
  const char* type_name() const override { return "Tower"; }
};

}  // namespace

TEST_CASE("nn: ModuleList and ModuleDict register their modules as children, in order") {
  TestContext ctx;
  auto tower = std::make_shared<Tower>(ctx);
  std::vector<std::string> names;
  for (const auto& [n, p] : tower->named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"blocks.0.weight", "blocks.0.bias", "blocks.2.weight", "heads.cls.weight",
                                          "heads.cls.bias", "heads.norm.weight", "heads.norm.bias"});
  CHECK(tower->blocks->size() == 3);
  CHECK(tower->blocks->at<nn::Linear>(2) != nullptr);
  FORGE_REQUIRE_ERROR(invalid_argument, "nn.ModuleList", tower->blocks->at<nn::Linear>(1));
  FORGE_REQUIRE_ERROR(out_of_range, "nn.ModuleList", tower->blocks->at(3));
  FORGE_REQUIRE_ERROR(not_implemented, "nn.forward", tower->blocks->forward(ctx.zeros({1, 4})));
  CHECK(tower->heads->keys() == std::vector<std::string>{"cls", "norm"});
  CHECK(tower->heads->contains("norm"));
  auto msg = FORGE_REQUIRE_ERROR(invalid_argument, "nn.ModuleDict", tower->heads->at("missing"));
  CHECK_THAT(msg, Catch::Contains("keys: [cls, norm]"));
  FORGE_REQUIRE_ERROR(invalid_argument, "nn.register_module",
                      tower->heads->insert("a.b", std::make_shared<nn::ReLU>()));
  // Replacing a key keeps its place; pop removes it.
  auto other = std::make_shared<nn::Linear>(ctx, 4, 3);
  tower->heads->insert("cls", other);
  CHECK(tower->heads->keys() == std::vector<std::string>{"cls", "norm"});
  CHECK(tower->heads->at("cls") == other);
  CHECK(tower->heads->pop("norm") != nullptr);
  CHECK(tower->heads->keys() == std::vector<std::string>{"cls"});
  CHECK(tower->state_dict().count("heads.cls.weight") == 1);
  CHECK(tower->state_dict().at("heads.cls.weight").shape() == Shape{3, 4});
  nn::ModuleList list{std::make_shared<nn::ReLU>(), std::make_shared<nn::GELU>()};
  CHECK(list.size() == 2);
  nn::ModuleDict dict{{"a", std::make_shared<nn::ReLU>()}};
  CHECK(dict.size() == 1);
}

TEST_CASE("nn: named_modules walks the tree depth first, each module once, and apply visits the same") {
  TestContext ctx;
  auto tower = std::make_shared<Tower>(ctx);
  auto shared = std::make_shared<nn::ReLU>();
  tower->blocks->push_back(shared);
  tower->blocks->push_back(shared);  // registered twice: listed once
  std::vector<std::string> names;
  for (const auto& [n, m] : tower->named_modules()) names.push_back(n + ":" + m->type_name());
  CHECK(names == std::vector<std::string>{":Tower", "blocks:ModuleList", "blocks.0:Linear", "blocks.1:ReLU",
                                          "blocks.2:Linear", "blocks.3:ReLU", "heads:ModuleDict", "heads.cls:Linear",
                                          "heads.norm:LayerNorm"});
  CHECK(tower->named_modules().front().second == tower);  // shares the owner
  CHECK(tower->modules(false).size() == 8);
  std::vector<std::string> visited;
  tower->apply([&](const std::string& n, nn::Module& m) { visited.push_back(n + ":" + m.type_name()); });
  CHECK(visited == names);
  int linears = 0;
  tower->apply([&](nn::Module& m) { linears += std::string(m.type_name()) == "Linear"; });
  CHECK(linears == 3);
  nn::Linear on_stack(ctx, 2, 2);  // not held by a shared_ptr: the self entry owns nothing
  CHECK(on_stack.named_modules().front().second.get() == &on_stack);
}

TEST_CASE("nn: requires_grad_(false) freezes a subtree: no gradients there, the optimizer leaves it alone") {
  TestContext ctx;
  auto tower = std::make_shared<Tower>(ctx);
  tower->blocks->requires_grad_(false);
  CHECK(tower->parameter_count() == 20 + 16 + 10 + 8);
  CHECK(tower->parameter_count(true) == 10 + 8);
  for (const auto& [n, p] : tower->named_parameters()) CHECK(p.requires_grad() == (n.rfind("heads", 0) == 0));
  const Tensor frozen_before = tower->blocks->at<nn::Linear>(0)->parameters()[0].clone();
  optim::SGD sgd(tower->parameters(), {.lr = 0.1});
  Tensor loss = tower->forward(ctx.randn({3, 4})).square().sum();
  loss.backward();
  for (const auto& [n, p] : tower->named_parameters()) CHECK(p.grad().defined() == (n.rfind("heads", 0) == 0));
  sgd.step();
  CHECK(same_bits(tower->blocks->at<nn::Linear>(0)->parameters()[0], frozen_before));
  tower->requires_grad_(true);
  CHECK(tower->parameter_count(true) == tower->parameter_count());
}

TEST_CASE("nn: printing a module tree shows each module with its parameter count") {
  TestContext ctx;
  auto tower = std::make_shared<Tower>(ctx);
  tower->heads->at("norm")->requires_grad_(false);
  std::ostringstream out;
  out << *tower;
  CHECK(out.str() ==
        "Tower (54 parameters, 46 trainable)\n"
        "  (blocks): ModuleList (36 parameters)\n"
        "    (0): Linear (20 parameters: weight [4, 4], bias [4])\n"
        "    (1): ReLU\n"
        "    (2): Linear (16 parameters: weight [4, 4])\n"
        "  (heads): ModuleDict (18 parameters, 10 trainable)\n"
        "    (cls): Linear (10 parameters: weight [2, 4], bias [2])\n"
        "    (norm): LayerNorm (8 parameters, 0 trainable: weight [4], bias [4])\n");
  CHECK(tower->to_string() == out.str());
}

TEST_CASE("nn: the module tree example of docs/TRAINING.md prints what the page shows") {
  TestContext ctx;
  struct Tower : nn::Module {
    const char* type_name() const override { return "Tower"; }
  };
  auto model = std::make_shared<Tower>();
  // The page's snippet, as written there.
  auto blocks = model->register_module("blocks", std::make_shared<nn::ModuleList>());
  blocks->push_back(std::make_shared<nn::Linear>(ctx, 4, 4));
  blocks->push_back(std::make_shared<nn::ReLU>());
  model->register_module("heads", std::make_shared<nn::ModuleDict>())
      ->insert("cls", std::make_shared<nn::Linear>(ctx, 4, 2));
  blocks->requires_grad_(false);  // fine-tune the heads only
  std::ostringstream out;
  out << *model;
  CHECK(out.str() ==
        "Tower (30 parameters, 10 trainable)\n"
        "  (blocks): ModuleList (20 parameters, 0 trainable)\n"
        "    (0): Linear (20 parameters, 0 trainable: weight [4, 4], bias [4])\n"
        "    (1): ReLU\n"
        "  (heads): ModuleDict (10 parameters)\n"
        "    (cls): Linear (10 parameters: weight [2, 4], bias [2])\n");
}
