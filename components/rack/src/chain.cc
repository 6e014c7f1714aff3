#include "once/rack/chain.h"

namespace once::rack {

JobId FirstJobId(const SessionId& session_id) {
  return JobId::FromDigest(Blake2b256({AsBytes("None"), session_id.bytes}));
}

JobId NextJobId(const Digest256& to_be_signed_digest) {
  return JobId::FromDigest(Blake2b256({AsBytes("Some"), to_be_signed_digest}));
}

JobId NextJobIdAfterBurned(const JobId& burned) {
  return JobId::FromDigest(Blake2b256({AsBytes("Burned"), burned.bytes}));
}

SessionId DeriveSessionId(std::string_view baseboard, const Nonce& server_nonce,
                          const Nonce& signer_nonce) {
  const uint8_t length = static_cast<uint8_t>(std::min<size_t>(baseboard.size(), 255));
  const uint8_t length_bytes[1] = {length};
  return SessionId::FromDigest(
      Blake2b256({AsBytes("SessionId"), length_bytes, AsBytes(baseboard.substr(0, length)),
                  server_nonce.bytes, signer_nonce.bytes}));
}

}  // namespace once::rack
