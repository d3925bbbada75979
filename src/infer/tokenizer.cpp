// WordPiece tokenization (policy in include/forge/infer/tokenizer.h). Text is
// decoded to code points once, normalized and split there, and each word is
// encoded back to UTF-8 for the vocabulary lookups, which reuse one buffer.

#include "forge/infer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "forge/error.h"

namespace forge::infer {
namespace {

constexpr const char* kOp = "wordpiece";

struct CodeRange {
  char32_t first;
  char32_t last;
};

#include "unicode_tables.inc"

template <std::size_t N>
bool in_ranges(const CodeRange (&table)[N], char32_t c) {
  const auto* it = std::upper_bound(std::begin(table), std::end(table), c,
                                    [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != std::begin(table) && c <= std::prev(it)->last;
}

bool is_ascii_punctuation(char32_t c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
}

// What clean-up removes: NUL, U+FFFD, and Cc, Cf and Co but tab, newline and carriage return.
bool is_removed(char32_t c) {
  if (c == 0 || c == 0xFFFD) return true;
  if (c == '\t' || c == '\n' || c == '\r') return false;
  if (c < 0x80) return c < 0x20 || c == 0x7F;
  return in_ranges(kOtherChars, c);
}

// Tab, newline, carriage return, Zs, and the line / paragraph separators
// (which the reference's pre-tokenizer splits at as White_Space).
bool is_space(char32_t c) {
  if (c < 0x80) return c == ' ' || c == '\t' || c == '\n' || c == '\r';
  return c == 0x2028 || c == 0x2029 || in_ranges(kSpaceSeparators, c);
}

bool is_punctuation(char32_t c) { return c < 0x80 ? is_ascii_punctuation(c) : in_ranges(kPunctuation, c); }

bool is_mark(char32_t c) { return c >= 0x300 && in_ranges(kNonspacingMarks, c); }

// The CJK Unified Ideographs blocks and their extensions and compatibility
// blocks, as BERT defines "Chinese characters" (not kana, not Hangul).
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

char32_t lowercase(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  const auto* it = std::lower_bound(std::begin(kLowercaseChars), std::end(kLowercaseChars), c,
                                    [](const LowercaseChar& e, char32_t v) { return e.from < v; });
  return it != std::end(kLowercaseChars) && it->from == c ? it->to : c;
}

// Appends c's NFD decomposition less its Mn marks.
void append_stripped(char32_t c, std::u32string& out) {
  if (c < 0xC0) {
    out.push_back(c);
  } else if (c >= 0xAC00 && c <= 0xD7A3) {  // Hangul syllable: L V (T) jamo, arithmetically (Unicode §3.12)
    const char32_t s = c - 0xAC00;
    out.push_back(0x1100 + s / 588);
    out.push_back(0x1161 + (s % 588) / 28);
    if (s % 28 != 0) out.push_back(0x11A7 + s % 28);
  } else if (is_mark(c)) {
    // dropped
  } else {
    const auto* it = std::lower_bound(std::begin(kStrippedChars), std::end(kStrippedChars), c,
                                      [](const StrippedChar& e, char32_t v) { return e.from < v; });
    if (it == std::end(kStrippedChars) || it->from != c) {
      out.push_back(c);
      return;
    }
    for (char32_t part : it->to)
      if (part != 0) out.push_back(part);
  }
}

// UTF-8 to code points; an ill-formed sequence (overlong, surrogate, past
// U+10FFFF, truncated) reads as one U+FFFD per bad byte.
std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      out.push_back(b);
      ++i;
      continue;
    }
    const int len = b >= 0xF8 ? 0 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    char32_t c = len == 4 ? b & 0x07 : len == 3 ? b & 0x0F : b & 0x1F;
    bool ok = len != 0 && i + static_cast<std::size_t>(len) <= n;
    for (int k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      c = (c << 6) | (p[i + k] & 0x3F);
    }
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && c >= kMin[len] && c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF);
    out.push_back(ok ? c : 0xFFFD);
    i += ok ? static_cast<std::size_t>(len) : 1;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::u32string normalized(std::string_view text, const WordPieceOptions& o) {
  std::u32string out;
  out.reserve(text.size());
  std::u32string parts;
  for (char32_t c : decode_utf8(text)) {
    if (is_removed(c)) continue;
    if (is_space(c)) {
      out.push_back(' ');
      continue;
    }
    const bool cjk = o.split_cjk && is_cjk(c);
    if (cjk) out.push_back(' ');
    parts.clear();
    if (o.strip_accents)
      append_stripped(c, parts);
    else
      parts.push_back(c);
    for (char32_t p : parts) {
      if (!o.lowercase) {
        out.push_back(p);
      } else if (p == 0x130) {  // İ: "i" and a combining dot above, as full lowercasing gives
        out.push_back('i');
        out.push_back(0x307);
      } else {
        out.push_back(lowercase(p));
      }
    }
    if (cjk) out.push_back(' ');
  }
  return out;
}

// Calls fn(word) for each word of normalized text: runs between spaces, each
// punctuation character a word of its own.
template <typename Fn>
void for_each_word(const std::u32string& text, Fn&& fn) {
  std::size_t start = 0;
  const auto flush = [&](std::size_t end) {
    if (end > start) fn(std::u32string_view(text).substr(start, end - start));
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    if (c == ' ' || c == 0x2028 || c == 0x2029) {
      flush(i);
      start = i + 1;
    } else if (is_punctuation(c)) {
      flush(i);
      start = i;
      flush(i + 1);
      start = i + 1;
    }
  }
  flush(text.size());
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  FORGE_CHECK(options_.max_length >= 2, invalid_argument, kOp, "max_length must be at least 2 ([CLS] and [SEP]), got ",
              options_.max_length);
  FORGE_CHECK(options_.max_input_chars_per_word >= 1, invalid_argument, kOp,
              "max_input_chars_per_word must be positive, got ", options_.max_input_chars_per_word);
  ids_.reserve(vocab_.size());
  for (std::size_t i = 0; i < vocab_.size(); ++i) {
    FORGE_CHECK(!vocab_[i].empty(), invalid_argument, kOp, "vocabulary entry ", i, " is empty");
    const bool fresh = ids_.emplace(vocab_[i], static_cast<std::int64_t>(i)).second;
    FORGE_CHECK(fresh, invalid_argument, kOp, "vocabulary entry ", i, " '", vocab_[i], "' repeats entry ",
                ids_.find(vocab_[i])->second);
  }
  const auto special = [&](const std::string& token) {
    const std::int64_t id = token_to_id(token);
    FORGE_CHECK(id >= 0, invalid_argument, kOp, "special token '", token, "' is not in the vocabulary (", vocab_.size(),
                " entries)");
    return id;
  };
  unk_id_ = special(options_.unk_token);
  cls_id_ = special(options_.cls_token);
  sep_id_ = special(options_.sep_token);
  pad_id_ = special(options_.pad_token);
}

WordPieceTokenizer WordPieceTokenizer::from_file(const std::filesystem::path& vocab_txt, WordPieceOptions options) {
  std::ifstream in(vocab_txt, std::ios::binary);
  FORGE_CHECK(in.good(), io, kOp, "cannot open vocabulary ", vocab_txt.string());
  std::vector<std::string> vocab;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    vocab.push_back(std::move(line));
  }
  FORGE_CHECK(!in.bad(), io, kOp, "error reading vocabulary ", vocab_txt.string());
  try {
    return WordPieceTokenizer(std::move(vocab), std::move(options));
  } catch (const Error& e) {
    FORGE_FAIL(io, kOp, "vocabulary ", vocab_txt.string(), ": ", e.what());
  }
}

std::string WordPieceTokenizer::normalize(std::string_view text) const {
  std::string out;
  for (char32_t c : normalized(text, options_)) append_utf8(out, c);
  return out;
}

std::int64_t WordPieceTokenizer::token_to_id(std::string_view token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

const std::string& WordPieceTokenizer::id_to_token(std::int64_t id) const {
  FORGE_CHECK(id >= 0 && id < vocab_size(), out_of_range, kOp, "token id ", id, " is outside the vocabulary [0, ",
              vocab_size(), ")");
  return vocab_[static_cast<std::size_t>(id)];
}

void WordPieceTokenizer::word_pieces(std::string_view word, std::vector<std::int64_t>& ids) const {
  // Byte offsets of the word's code points, and its end.
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < word.size(); ++i)
    if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) starts.push_back(i);
  if (static_cast<std::int64_t>(starts.size()) > options_.max_input_chars_per_word) {
    ids.push_back(unk_id_);
    return;
  }
  starts.push_back(word.size());
  const std::size_t first = ids.size();
  std::string candidate;
  for (std::size_t begin = 0; begin + 1 < starts.size();) {
    std::size_t end = starts.size() - 1;
    std::int64_t found = -1;
    for (; end > begin; --end) {
      candidate.assign(begin == 0 ? "" : "##");
      candidate.append(word.substr(starts[begin], starts[end] - starts[begin]));
      found = token_to_id(candidate);
      if (found >= 0) break;
    }
    if (found < 0) {  // an unmatchable part makes the whole word unknown
      ids.resize(first);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(found);
    begin = end;
  }
}

void WordPieceTokenizer::piece_ids(std::string_view text, std::vector<std::int64_t>& ids) const {
  std::string word;
  for_each_word(normalized(text, options_), [&](std::u32string_view w) {
    word.clear();
    for (char32_t c : w) append_utf8(word, c);
    word_pieces(word, ids);
  });
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::int64_t> ids;
  piece_ids(text, ids);
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (std::int64_t id : ids) pieces.push_back(vocab_[static_cast<std::size_t>(id)]);
  return pieces;
}

std::vector<std::int64_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids{cls_id_};
  piece_ids(text, ids);
  if (static_cast<std::int64_t>(ids.size()) > options_.max_length - 1)
    ids.resize(static_cast<std::size_t>(options_.max_length - 1));
  ids.push_back(sep_id_);
  return ids;
}

TokenBatch WordPieceTokenizer::encode_batch(std::span<const std::string> texts) const {
  std::vector<std::vector<std::int64_t>> rows;
  rows.reserve(texts.size());
  TokenBatch batch;
  for (const std::string& text : texts) {
    rows.push_back(encode(text));
    batch.columns = std::max(batch.columns, static_cast<std::int64_t>(rows.back().size()));
  }
  batch.rows = static_cast<std::int64_t>(rows.size());
  const auto cells = static_cast<std::size_t>(batch.rows * batch.columns);
  batch.ids.assign(cells, pad_id_);
  batch.attention_mask.assign(cells, 0);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::size_t base = r * static_cast<std::size_t>(batch.columns);
    std::copy(rows[r].begin(), rows[r].end(), batch.ids.begin() + static_cast<std::ptrdiff_t>(base));
    std::fill_n(batch.attention_mask.begin() + static_cast<std::ptrdiff_t>(base), rows[r].size(), std::uint8_t{1});
    batch.lengths.push_back(static_cast<std::int64_t>(rows[r].size()));
  }
  return batch;
}

}  // namespace forge::infer
