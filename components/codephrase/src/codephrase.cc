#include "once/codephrase/codephrase.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

namespace once::codephrase {
namespace internal {
extern const char kBip39EnglishText[];
}  // namespace internal
namespace {

std::vector<std::string_view> ParseList() {
  std::vector<std::string_view> words;
  std::string_view text(internal::kBip39EnglishText);
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view word = text.substr(0, end);
    if (!word.empty()) words.push_back(word);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  ONCE_CHECK_MSG(words.size() == kListWords, "embedded BIP-39 list must have 2048 words");
  ONCE_CHECK_MSG(std::is_sorted(words.begin(), words.end()), "embedded BIP-39 list is sorted");
  return words;
}

const std::vector<std::string_view>& List() {
  static const std::vector<std::string_view> list = ParseList();
  return list;
}

// Splits `phrase` into word indices; exactly `expected` words.
Result<std::vector<uint16_t>> ParseIndices(std::string_view phrase, size_t expected) {
  if (phrase.size() > kPhraseBytesMax) {
    return LimitError("codephrase_bytes_max", static_cast<int64_t>(phrase.size()),
                      static_cast<int64_t>(kPhraseBytesMax));
  }
  std::vector<uint16_t> indices;
  while (true) {
    size_t end = phrase.find(kSeparator);
    ONCE_ASSIGN_OR_RETURN(uint16_t index, WordIndex(phrase.substr(0, end)));
    indices.push_back(index);
    if (end == std::string_view::npos) break;
    phrase.remove_prefix(end + 1);
  }
  if (indices.size() != expected) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "codephrase has " + std::to_string(indices.size()) + " words, expected " +
                         std::to_string(expected));
  }
  return indices;
}

}  // namespace

std::span<const std::string_view> Words() { return List(); }

Result<uint16_t> WordIndex(std::string_view word) {
  std::array<char, 16> lower{};
  if (word.empty() || word.size() > lower.size()) {
    return MakeError(ErrorCode::kInvalidArgument, "unknown codephrase word", std::string(word));
  }
  for (size_t i = 0; i < word.size(); ++i) {
    lower[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(word[i])));
  }
  std::string_view key(lower.data(), word.size());
  const auto& list = List();
  auto it = std::lower_bound(list.begin(), list.end(), key);
  if (it == list.end() || *it != key) {
    return MakeError(ErrorCode::kInvalidArgument, "unknown codephrase word", std::string(word));
  }
  return static_cast<uint16_t>(it - list.begin());
}

size_t WordsForBytes(size_t byte_count) { return (byte_count * 8 + kWordBits - 1) / kWordBits; }

std::string EncodeBytes(std::span<const uint8_t> bytes) {
  ONCE_CHECK(bytes.size() <= kPhraseValueBytesMax);
  const size_t words = WordsForBytes(bytes.size());
  const size_t pad_bits = words * kWordBits - bytes.size() * 8;
  std::string out;
  for (size_t w = 0; w < words; ++w) {
    uint16_t index = 0;
    for (size_t b = 0; b < kWordBits; ++b) {
      size_t bit = w * kWordBits + b;
      int value = 0;
      if (bit >= pad_bits) {
        size_t k = bit - pad_bits;
        value = (bytes[k / 8] >> (7 - k % 8)) & 1;
      }
      index = static_cast<uint16_t>((index << 1) | value);
    }
    if (w > 0) out.push_back(kSeparator);
    out.append(List()[index]);
  }
  return out;
}

Result<Bytes> DecodeBytes(std::string_view phrase, size_t byte_count) {
  ONCE_CHECK(byte_count <= kPhraseValueBytesMax);
  const size_t words = WordsForBytes(byte_count);
  ONCE_ASSIGN_OR_RETURN(auto indices, ParseIndices(phrase, words));
  const size_t pad_bits = words * kWordBits - byte_count * 8;
  Bytes out(byte_count, 0);
  for (size_t w = 0; w < words; ++w) {
    for (size_t b = 0; b < kWordBits; ++b) {
      size_t bit = w * kWordBits + b;
      int value = (indices[w] >> (kWordBits - 1 - b)) & 1;
      if (bit < pad_bits) {
        if (value != 0) {
          return MakeError(ErrorCode::kInvalidArgument, "codephrase value out of range",
                           std::string(phrase));
        }
        continue;
      }
      size_t k = bit - pad_bits;
      out[k / 8] = static_cast<uint8_t>(out[k / 8] | (value << (7 - k % 8)));
    }
  }
  return out;
}

std::string EncodeNumber(uint64_t value, size_t words) {
  ONCE_CHECK(words >= 1 && words <= 6);
  ONCE_CHECK(words == 6 || value < (uint64_t{1} << (kWordBits * words)));
  std::string out;
  for (size_t w = 0; w < words; ++w) {
    size_t shift = kWordBits * (words - 1 - w);
    if (w > 0) out.push_back(kSeparator);
    out.append(List()[(value >> shift) & (kListWords - 1)]);
  }
  return out;
}

Result<uint64_t> DecodeNumber(std::string_view phrase, size_t words) {
  ONCE_CHECK(words >= 1 && words <= 6);
  ONCE_ASSIGN_OR_RETURN(auto indices, ParseIndices(phrase, words));
  uint64_t value = 0;
  for (uint16_t index : indices) {
    if (value > (UINT64_MAX - index) / kListWords) {
      return MakeError(ErrorCode::kInvalidArgument, "codephrase value out of range",
                       std::string(phrase));
    }
    value = value * kListWords + index;
  }
  return value;
}

}  // namespace once::codephrase
