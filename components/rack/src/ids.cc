#include "once/rack/ids.h"

#include <sodium.h>

#include "once/codephrase/codephrase.h"
#include "once/rack/keys.h"

namespace once::rack {

Digest256 Blake2b256(std::initializer_list<std::span<const uint8_t>> parts) {
  EnsureSodium();
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, 32);
  for (auto part : parts) crypto_generichash_update(&state, part.data(), part.size());
  Digest256 out;
  crypto_generichash_final(&state, out.data(), out.size());
  return out;
}

std::span<const uint8_t> AsBytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

Result<std::array<uint8_t, kId88Bytes>> ParseId88(std::string_view phrase) {
  ONCE_ASSIGN_OR_RETURN(Bytes raw, codephrase::DecodeBytes(phrase, kId88Bytes));
  std::array<uint8_t, kId88Bytes> out{};
  std::copy(raw.begin(), raw.end(), out.begin());
  return out;
}

std::string FormatId88(std::span<const uint8_t, kId88Bytes> bytes) {
  return codephrase::EncodeBytes(bytes);
}

}  // namespace once::rack
