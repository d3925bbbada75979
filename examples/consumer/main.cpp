// Built against an installed forge package by the consumer_package test.
#include <forge/forge.h>

#include <iostream>

int main() {
  forge::ExecContext ctx;
  auto a = ctx.ones({2, 3});
  auto b = ctx.full({3}, 2.0);
  auto c = forge::add(a, b);
  std::cout << c << "\n";
  const auto values = c.to_vector<float>();
  if (values.size() != 6) {
    std::cerr << "consumer: expected 6 elements, got " << values.size() << "\n";
    return 1;
  }
  for (float v : values) {
    if (v != 3.0f) {
      std::cerr << "consumer: expected every element to be 3, got " << v << "\n";
      return 1;
    }
  }
  return 0;
}
