// File: chain.h
//
// The job hash chain and universe-unique session ids. All hashes are
// BLAKE2b-256 over a tag and the value; ids keep the low 88 bits.
//
//   first job:           FirstJobId(session)          = H("None"   || session id)
//   after job J:         NextJobId(ToBeSignedDigest(J)) = H("Some" || J's to-be-signed digest)
//   after burned job X:  NextJobIdAfterBurned(X)      = H("Burned" || X)
//   session id:          H("SessionId" || u8 len || baseboard || server nonce || signer nonce)
//
// The successor hashes the predecessor's signed bytes, not its id, so a sled
// holding the predecessor can compute the successor. The session id binds the
// session to the accepting sled and a nonce that sled issued once, so the same
// signed session start cannot create a session in two gossip universes.

#pragma once

#include <string_view>

#include "once/rack/ids.h"

namespace once::rack {

JobId FirstJobId(const SessionId& session_id);
JobId NextJobId(const Digest256& to_be_signed_digest);
JobId NextJobIdAfterBurned(const JobId& burned);
SessionId DeriveSessionId(std::string_view baseboard, const Nonce& server_nonce,
                          const Nonce& signer_nonce);

}  // namespace once::rack
