// Printing as libtorch prints: one format for the whole tensor (integers
// without a point; otherwise fixed with 4 decimals, with a common scale factor
// or scientific notation when magnitudes differ), 1-D tensors as a column,
// matrices as rows, higher ranks as "(i,j,.,.) =" slices, and a footer naming
// the type and shape.

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "forge/tensor.h"

namespace forge {
namespace {

const char* type_name(DType t) {
  switch (t) {
    case DType::f32: return "CPUFloatType";
    case DType::f64: return "CPUDoubleType";
    case DType::f16: return "CPUHalfType";
    case DType::bf16: return "CPUBFloat16Type";
    case DType::i32: return "CPUIntType";
    case DType::i64: return "CPULongType";
    case DType::u8: return "CPUByteType";
    case DType::boolean: return "CPUBoolType";
  }
  return "CPUType";
}

struct Format {
  bool integer = true;
  bool scientific = false;
  double scale = 1.0;
  int width = 1;
  int precision = 4;
};

// libtorch's __printFormat, over the finite values.
Format choose_format(const std::vector<double>& values) {
  Format f;
  double max_abs = 0, min_abs = std::numeric_limits<double>::infinity();
  bool any = false;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    any = true;
    const double a = std::fabs(v);
    max_abs = std::max(max_abs, a);
    min_abs = std::min(min_abs, a);
    if (std::ceil(v) != v) f.integer = false;
  }
  if (!any) {
    max_abs = min_abs = 1;
  }
  const int exp_max = max_abs != 0 ? static_cast<int>(std::floor(std::log10(max_abs)) + 1) : 1;
  const int exp_min = min_abs != 0 ? static_cast<int>(std::floor(std::log10(min_abs)) + 1) : 1;
  if (f.integer) {
    if (exp_max > 9) {
      f.integer = false;
      f.scientific = true;
      f.width = 11;
    } else {
      f.width = exp_max + 1;
    }
    return f;
  }
  if (exp_max - exp_min > 4) {
    f.scientific = true;
    f.width = (std::abs(exp_max) > 99 || std::abs(exp_min) > 99) ? 12 : 11;
  } else if (exp_max > 5 || exp_max < 0) {
    f.width = 7;
    f.scale = std::pow(10.0, exp_max - 1);
  } else {
    f.width = exp_max == 0 ? 7 : exp_max + 6;
  }
  return f;
}

void print_value(std::ostream& out, const Format& f, double v) {
  out << std::setw(f.width);
  if (f.integer) {
    out << std::fixed << std::setprecision(0) << v;
  } else if (f.scientific) {
    out << std::scientific << std::setprecision(f.precision) << v;
  } else {
    out << std::fixed << std::setprecision(f.precision) << v / f.scale;
  }
}

void print_matrix(std::ostream& out, const Format& f, const double* data, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      print_value(out, f, data[r * cols + c]);
      out << (c + 1 == cols ? "\n" : " ");
    }
  }
}

}  // namespace

std::string Tensor::str() const {
  std::ostringstream out;
  out << *this;
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) {
  if (!t.defined()) return out << "[ Tensor (undefined) ]";
  if (t.buffer()->stale()) return out << "[ stale arena output " << t.shape() << " ]";
  const std::ios_base::fmtflags flags = out.flags();
  const std::streamsize precision = out.precision();
  const std::vector<double> values = t.to_vector<double>();
  const Format f = choose_format(values);
  if (f.scale != 1.0) out << std::defaultfloat << std::setprecision(0) << std::scientific << f.scale << " *\n";
  const Shape& s = t.shape();
  if (t.dim() == 0) {
    print_value(out, Format{f.integer, f.scientific, f.scale, 0, f.precision}, values[0]);
    out << "\n";
  } else if (t.numel() > 0) {
    if (t.dim() == 1) {
      print_matrix(out, f, values.data(), s[0], 1);
    } else {
      const std::int64_t rows = s[t.dim() - 2], cols = s[t.dim() - 1];
      const std::int64_t matrices = t.numel() / (rows * cols);
      for (std::int64_t m = 0; m < matrices; ++m) {
        if (t.dim() > 2) {
          out << "(";
          std::int64_t rest = m;
          std::vector<std::int64_t> index(static_cast<std::size_t>(t.dim() - 2));
          for (int d = t.dim() - 3; d >= 0; --d) {
            index[static_cast<std::size_t>(d)] = rest % s[d];
            rest /= s[d];
          }
          for (std::int64_t i : index) out << i + 1 << ",";
          out << ".,.) = \n";
        }
        print_matrix(out, f, values.data() + m * rows * cols, rows, cols);
        if (t.dim() > 2 && m + 1 < matrices) out << "\n";
      }
    }
  }
  out << "[ " << type_name(t.dtype()) << "{";
  for (int d = 0; d < t.dim(); ++d) out << (d ? "," : "") << s[d];
  out << "} ]";
  out.flags(flags);
  out.precision(precision);
  return out;
}

}  // namespace forge
