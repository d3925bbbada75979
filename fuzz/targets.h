#pragma once
// The fuzz targets' bodies. Each takes one input, runs it through forge and
// checks what came back; it returns 0 (libFuzzer's "keep going"). A refusal
// is a forge::Error, which the body accepts when its code is one the API
// documents for that input; anything else escapes: a Violation (a broken
// invariant the body checks), another exception, a crash or a sanitizer
// report. fuzz/<name>_fuzzer.cpp hands libFuzzer's inputs to fuzz_<name>;
// tests/fuzz_corpus_test.cpp replays fuzz/corpus/<name>/ through it.

#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace forge_fuzz {

// A broken invariant: the input was accepted but the result is wrong, or a
// refusal carried the wrong error code.
class Violation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// The bytes as a safetensors file, read through the mapping path.
int fuzz_safetensors(const std::uint8_t* data, std::size_t size);
// The bytes as a .npy file.
int fuzz_npy(const std::uint8_t* data, std::size_t size);
// The bytes as an IDX file, plain or (with the 1f 8b magic) gzip.
int fuzz_idx(const std::uint8_t* data, std::size_t size);
// The bytes decoded into a buffer, a dtype and a sequence of view ops, whose
// result is read whole and checked against an index model of its own.
int fuzz_views(const std::uint8_t* data, std::size_t size);

}  // namespace forge_fuzz
