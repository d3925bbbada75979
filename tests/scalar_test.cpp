// Scalar and DimList: the two small argument types of the op library.

#include <cstdint>

#include "support.h"

using forge::DType;
using forge::Scalar;

TEST_CASE("scalar: a Scalar remembers whether it was a bool, an integer or a float") {
  CHECK(Scalar(true).is_bool());
  CHECK(Scalar(3).is_integral());
  CHECK(Scalar(std::int64_t{1} << 40).to_int() == (std::int64_t{1} << 40));
  CHECK(Scalar(std::uint8_t{200}).to_int() == 200);
  CHECK(Scalar(2.5f).is_floating());
  CHECK(Scalar(2.5).to_double() == 2.5);
  CHECK(Scalar(-2.7).to_int() == -2);  // truncates toward zero
  CHECK(Scalar(7).to_double() == 7.0);
  CHECK(Scalar(false).to_int() == 0);
}

TEST_CASE("scalar: result_type of a tensor and a Scalar follows libtorch's table") {
  struct Row {
    DType tensor;
    Scalar scalar;
    DType expected;
  };
  const Row rows[] = {
      // a scalar never widens a tensor within its category
      {DType::i32, Scalar(2), DType::i32},
      {DType::u8, Scalar(1000), DType::u8},
      {DType::i8, Scalar(-1000), DType::i8},
      {DType::f16, Scalar(0.5), DType::f16},
      {DType::bf16, Scalar(3), DType::bf16},
      {DType::f64, Scalar(1.5f), DType::f64},
      {DType::i64, Scalar(true), DType::i64},
      {DType::f32, Scalar(true), DType::f32},
      {DType::boolean, Scalar(false), DType::boolean},
      // a float scalar makes integer and bool results the default float
      {DType::i32, Scalar(0.5), DType::f32},
      {DType::i64, Scalar(1.0), DType::f32},
      {DType::u8, Scalar(2.0f), DType::f32},
      {DType::i8, Scalar(0.5), DType::f32},
      {DType::boolean, Scalar(1.5), DType::f32},
      // an integer scalar makes a bool result i64
      {DType::boolean, Scalar(2), DType::i64},
  };
  for (const Row& row : rows) {
    INFO(forge::dtype_name(row.tensor) << " with a scalar of kind " << static_cast<int>(row.scalar.kind()));
    CHECK(forge::result_type(row.tensor, row.scalar) == row.expected);
  }
}

TEST_CASE("scalar: DimList takes one dim, a braced list, or nothing") {
  const forge::DimList none;
  CHECK(none.empty());
  const forge::DimList one = 1;
  CHECK(one.rank() == 1);
  CHECK(one[0] == 1);
  const forge::DimList two = {0, -1};
  CHECK(two.rank() == 2);
  CHECK(two[1] == -1);
  const forge::DimList from_dims = forge::Dims{2, 3, 4};
  CHECK(from_dims.rank() == 3);
}
