// Printing as libtorch 1.13 prints, so that output can be compared by eye or
// by diff: one number format per printed matrix (integers in the default
// float format; otherwise fixed with 4 decimals, a common scale factor, or
// scientific notation when magnitudes differ), 0-d tensors in the default
// format, 1-D tensors as a column, matrices as rows split into "Columns a to
// b" blocks at 80 characters, higher ranks as "(i,j,.,.) =" slices (first
// index fastest, rows indented by one), and a footer with type and shape.

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "forge/tensor.h"

namespace forge {
namespace {

constexpr std::int64_t kLineWidth = 80;

const char* scalar_type_name(DType t) {
  switch (t) {
    case DType::f32:
      return "FloatType";
    case DType::f64:
      return "DoubleType";
    case DType::f16:
      return "HalfType";
    case DType::bf16:
      return "BFloat16Type";
    case DType::i32:
      return "IntType";
    case DType::i64:
      return "LongType";
    case DType::u8:
      return "ByteType";
    case DType::boolean:
      return "BoolType";
    case DType::i8:
      return "CharType";
  }
  return "Type";
}

// libtorch's type label: the device ("CPU", "CUDA") and the scalar type.
std::string type_name(Device device, DType t) {
  return std::string(device.is_cpu() ? "CPU" : "CUDA") + scalar_type_name(t);
}

struct Format {
  double scale = 1;
  std::int64_t width = 0;
};

// Chooses the format of `n` values and sets the stream's float mode for it.
// (libtorch's rule, including its quirk of raising the largest exponent only
// for positive values.)
Format choose_format(std::ostream& out, const double* v, std::int64_t n) {
  if (n == 0) return {1, 0};
  bool integer = true;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::isfinite(v[i]) && v[i] != std::ceil(v[i])) {
      integer = false;
      break;
    }
  std::int64_t first = 0;
  while (first < n && !std::isfinite(v[first])) ++first;
  double exp_min = 1, exp_max = 1;
  if (first < n) {
    exp_min = exp_max = std::fabs(v[first]);
    for (std::int64_t i = first; i < n; ++i) {
      const double z = std::fabs(v[i]);
      if (!std::isfinite(z)) continue;
      if (z < exp_min) exp_min = z;
      if (v[i] > exp_max) exp_max = z;
    }
    exp_min = exp_min != 0 ? std::floor(std::log10(exp_min)) + 1 : 1;
    exp_max = exp_max != 0 ? std::floor(std::log10(exp_max)) + 1 : 1;
  }
  Format f;
  if (integer) {
    if (exp_max > 9) {
      f.width = 11;
      out << std::scientific << std::setprecision(4);
    } else {
      f.width = static_cast<std::int64_t>(exp_max) + 1;
      out << std::defaultfloat;
    }
  } else if (exp_max - exp_min > 4) {
    f.width = std::fabs(exp_max) > 99 || std::fabs(exp_min) > 99 ? 12 : 11;
    out << std::scientific << std::setprecision(4);
  } else {
    if (exp_max > 5 || exp_max < 0) {
      f.width = 7;
      f.scale = std::pow(10, exp_max - 1);
    } else {
      f.width = exp_max == 0 ? 7 : static_cast<std::int64_t>(exp_max) + 6;
    }
    out << std::fixed << std::setprecision(4);
  }
  return f;
}

void print_scale(std::ostream& out, double scale) {
  const auto flags = out.flags();
  out << std::defaultfloat << scale << " *\n";
  out.flags(flags);
}

void indent(std::ostream& out, std::int64_t n) { out << std::string(static_cast<std::size_t>(n), ' '); }

void print_matrix(std::ostream& out, const double* v, std::int64_t rows, std::int64_t cols, std::int64_t pad) {
  const Format f = choose_format(out, v, rows * cols);
  indent(out, pad);
  const std::int64_t per_line = std::max<std::int64_t>(1, (kLineWidth - pad) / (f.width + 1));
  for (std::int64_t first = 0; first < cols;) {
    const std::int64_t last = std::min(first + per_line, cols) - 1;
    if (per_line < cols) {
      if (first != 0) out << "\n";
      out << "Columns " << first + 1 << " to " << last + 1;
      indent(out, pad);
    }
    if (f.scale != 1) {
      print_scale(out, f.scale);
      indent(out, pad);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = first; c <= last; ++c) {
        out << std::setw(static_cast<int>(f.width)) << v[r * cols + c] / f.scale;
        if (c != last) {
          out << " ";
          continue;
        }
        out << "\n";
        if (r + 1 != rows) {
          indent(out, pad);
          if (f.scale != 1) out << " ";
        }
      }
    }
    first = last + 1;
  }
}

}  // namespace

std::string Tensor::str() const try {
  std::ostringstream out;
  out << *this;
  return out.str();
}
FORGE_CATCH_OOM("print")

std::ostream& operator<<(std::ostream& out, const Tensor& t) try {
  if (!t.defined()) return out << "[ Tensor (undefined) ]";
  if (t.buffer()->stale()) return out << "[ stale arena output " << t.shape() << " ]";
  const std::ios_base::fmtflags flags = out.flags();
  const std::streamsize precision = out.precision();
  const std::vector<double> v = t.to_vector<double>();
  const Shape& s = t.shape();
  if (t.dim() == 0) {
    out << std::defaultfloat << v[0] << "\n";
  } else if (t.dim() == 1) {
    if (!v.empty()) {
      const Format f = choose_format(out, v.data(), s[0]);
      if (f.scale != 1) print_scale(out, f.scale);
      for (double x : v) out << std::setw(static_cast<int>(f.width)) << x / f.scale << "\n";
    }
  } else if (t.dim() == 2) {
    if (!v.empty()) print_matrix(out, v.data(), s[0], s[1], 0);
  } else if (!v.empty()) {
    // Slices in libtorch's order: the first index changes fastest.
    const int outer = t.dim() - 2;
    const std::int64_t rows = s[outer], cols = s[outer + 1];
    Strides slice_strides = contiguous_strides(s);
    std::vector<std::int64_t> counter(static_cast<std::size_t>(outer), 0);
    for (bool first = true;; first = false) {
      if (!first) {
        int i = 0;
        while (i < outer && ++counter[static_cast<std::size_t>(i)] >= s[i]) counter[static_cast<std::size_t>(i++)] = 0;
        if (i == outer) break;
        out << "\n";
      }
      std::int64_t offset = 0;
      out << "(";
      for (int i = 0; i < outer; ++i) {
        offset += counter[static_cast<std::size_t>(i)] * slice_strides[i];
        out << counter[static_cast<std::size_t>(i)] + 1 << ",";
      }
      out << ".,.) = \n";
      print_matrix(out, v.data() + offset, rows, cols, 1);
    }
  }
  out << "[ " << type_name(t.device(), t.dtype()) << "{";
  for (int d = 0; d < t.dim(); ++d) out << (d ? "," : "") << s[d];
  out << "} ]";
  out.flags(flags);
  out.precision(precision);
  return out;
}
FORGE_CATCH_OOM("print")

}  // namespace forge
