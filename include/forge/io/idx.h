#pragma once
// IDX files: the format of MNIST and Fashion-MNIST, read plain or gzip.
//
//   0x00 0x00 <type> <ndims>  then ndims big-endian u32 extents,
//   then the elements, big-endian, row-major.
//
// Element types map to forge dtypes: u8 (0x08) -> u8; i8 (0x09), i16 (0x0B)
// and i32 (0x0C) -> i32; f32 (0x0D) -> f32; f64 (0x0E) -> f64. A file that
// starts with the gzip magic 1f 8b is decompressed as it is read.
//
// The reader trusts nothing it has not checked: the magic, the type, 1 to 8
// dims, an element count and byte size that fit in 63 bits, a size the file
// can hold (a plain file's length, a gzip file's length times deflate's
// largest ratio) before anything is allocated, then the data itself. The file
// must end where the data ends: trailing bytes are refused, since a header
// with wrong extents would otherwise read a valid-looking prefix of the data.
// Only a regular file is read: a FIFO or device is refused before anything
// could block on it. Every problem is an ErrorCode::io error naming the file;
// memory the system refuses (the output, or the 1 MiB pool chunk through
// which i8 and i16 are widened) is ErrorCode::out_of_memory, also naming it.

#include <string>

#include "forge/tensor.h"

namespace forge {
class ExecContext;
}

namespace forge::io {

// A contiguous tensor of shape [dims...] whose bytes belong to it (host
// memory freed with its last view, not the context's transient pool). `ctx`
// must be a CPU context (ErrorCode::device otherwise).
Tensor load_idx(ExecContext& ctx, const std::string& path);

}  // namespace forge::io
