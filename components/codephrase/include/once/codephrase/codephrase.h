// File: codephrase.h
//
// Codephrases: a number (or bytes, read big-endian) written in base 2048 over
// the BIP-39 English word list, 11 bits a word, most significant word first,
// words joined by '-'. An 88-bit id (11 bytes) is exactly 8 words; 32 bytes
// are 24 words whose top 8 bits are zero. Decoding is case-insensitive and
// strict: the word count must match, every word must be on the list and the
// padding bits above the value must be zero.
//
//   std::string p = codephrase::EncodeBytes(id);            // "abandon-...-zoo"
//   ONCE_ASSIGN_OR_RETURN(Bytes back, codephrase::DecodeBytes(p, 11));
//   std::string n = codephrase::EncodeNumber(5, 2);          // "abandon-absent"
//   ONCE_ASSIGN_OR_RETURN(uint64_t v, codephrase::DecodeNumber(n, 2));
//
// Errors: kInvalidArgument for an unknown word, a wrong word count or a value
// out of range (message says which); kLimitExceeded for a phrase longer than
// kPhraseBytesMax. Thread-safe (the list is immutable after first use).

#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "once/base/hex.h"
#include "once/base/result.h"

namespace once::codephrase {

inline constexpr size_t kWordBits = 11;
inline constexpr size_t kListWords = 2048;
// The longest phrase text a decoder reads (64 words of at most 8 letters).
inline constexpr size_t kPhraseBytesMax = 64 * 9;
// The most bytes one phrase encodes (64 words = 704 bits).
inline constexpr size_t kPhraseValueBytesMax = 88;
// Separator between words.
inline constexpr char kSeparator = '-';

// The 2048 words, sorted, lower case.
std::span<const std::string_view> Words();
// The index of `word` (any case) on the list; kInvalidArgument if absent.
Result<uint16_t> WordIndex(std::string_view word);

// Words needed for `byte_count` bytes: ceil(8 * byte_count / 11).
size_t WordsForBytes(size_t byte_count);

// `bytes` (big-endian, at most kPhraseValueBytesMax) as WordsForBytes words.
std::string EncodeBytes(std::span<const uint8_t> bytes);
// The inverse of EncodeBytes for a value of exactly `byte_count` bytes.
Result<Bytes> DecodeBytes(std::string_view phrase, size_t byte_count);

// `value` as exactly `words` words (1..6); the value must fit in 11*words bits.
std::string EncodeNumber(uint64_t value, size_t words);
// The inverse of EncodeNumber; out of range if it does not fit 11*words or 64 bits.
Result<uint64_t> DecodeNumber(std::string_view phrase, size_t words);

}  // namespace once::codephrase
