#include "once/rack/messages.h"

#include "wire.h"

namespace once::rack {
namespace {

using wire::Reader;
using wire::Writer;

enum PayloadKind : uint8_t {
  kSessionStartKind = 1,
  kSessionStopKind = 2,
  kSessionSkipKind = 3,
  kJobStartKind = 4,
  kJobStopKind = 5,
  kSledResetKind = 6,
};
enum MessageKind : uint8_t {
  kRequestKind = 1,
  kJobStartedKind = 16,
  kJobStoppedKind = 17,
  kJobCancelledKind = 18,
  kJobErrorKind = 19,
  kSledErrorKind = 20,
  kVersionKind = 21,
  kJobSkippedKind = 22,
  kJobInterruptedKind = 23,
  kLifeMarkerKind = 24,
};
constexpr std::string_view kSigningContext = "once.sush.request.v1";

template <class Id>
Result<Id> ReadId(Reader& r) {
  ONCE_ASSIGN_OR_RETURN(auto raw, r.Fixed<kId88Bytes>());
  return Id{raw};
}

Result<std::string> ReadBaseboard(Reader& r) {
  return r.String("baseboard_bytes_max", kBaseboardBytesMax);
}

// ---- payloads ----

struct PayloadWriter {
  Writer& w;
  Status operator()(const SessionStart& p) {
    w.U8(kSessionStartKind);
    ONCE_RETURN_IF_ERROR(w.String(p.baseboard, "baseboard_bytes_max", kBaseboardBytesMax));
    w.Raw(p.server_nonce.bytes);
    w.Raw(p.signer_nonce.bytes);
    return Ok();
  }
  Status operator()(const SessionStop& p) {
    w.U8(kSessionStopKind);
    w.Raw(p.session_id.bytes);
    return Ok();
  }
  Status operator()(const SessionSkip& p) {
    w.U8(kSessionSkipKind);
    w.Raw(p.session_id.bytes);
    w.Raw(p.job_id.bytes);
    return Ok();
  }
  Status operator()(const JobStart& p) {
    w.U8(kJobStartKind);
    w.Raw(p.job_id.bytes);
    w.Raw(p.session_id.bytes);
    ONCE_RETURN_IF_ERROR(w.String(p.command, "command_bytes_max", kCommandBytesMax));
    ONCE_RETURN_IF_ERROR(w.String(p.target, "target_bytes_max", kTargetBytesMax));
    w.U8(p.concurrent ? 1 : 0);
    return Ok();
  }
  Status operator()(const JobStop& p) {
    w.U8(kJobStopKind);
    w.Raw(p.job_id.bytes);
    return Ok();
  }
  Status operator()(const SledReset& p) {
    w.U8(kSledResetKind);
    ONCE_RETURN_IF_ERROR(w.String(p.baseboard, "baseboard_bytes_max", kBaseboardBytesMax));
    w.Raw(p.reset_nonce.bytes);
    return Ok();
  }
};

Result<RequestPayload> ReadPayloadBody(Reader& r, uint8_t kind) {
  switch (kind) {
    case kSessionStartKind: {
      SessionStart p;
      ONCE_ASSIGN_OR_RETURN(p.baseboard, ReadBaseboard(r));
      ONCE_ASSIGN_OR_RETURN(p.server_nonce, ReadId<Nonce>(r));
      ONCE_ASSIGN_OR_RETURN(p.signer_nonce, ReadId<Nonce>(r));
      return p;
    }
    case kSessionStopKind: {
      SessionStop p;
      ONCE_ASSIGN_OR_RETURN(p.session_id, ReadId<SessionId>(r));
      return p;
    }
    case kSessionSkipKind: {
      SessionSkip p;
      ONCE_ASSIGN_OR_RETURN(p.session_id, ReadId<SessionId>(r));
      ONCE_ASSIGN_OR_RETURN(p.job_id, ReadId<JobId>(r));
      return p;
    }
    case kJobStartKind: {
      JobStart p;
      ONCE_ASSIGN_OR_RETURN(p.job_id, ReadId<JobId>(r));
      ONCE_ASSIGN_OR_RETURN(p.session_id, ReadId<SessionId>(r));
      ONCE_ASSIGN_OR_RETURN(p.command, r.String("command_bytes_max", kCommandBytesMax));
      ONCE_ASSIGN_OR_RETURN(p.target, r.String("target_bytes_max", kTargetBytesMax));
      ONCE_ASSIGN_OR_RETURN(p.concurrent, r.Bool());
      return p;
    }
    case kJobStopKind: {
      JobStop p;
      ONCE_ASSIGN_OR_RETURN(p.job_id, ReadId<JobId>(r));
      return p;
    }
    case kSledResetKind: {
      SledReset p;
      ONCE_ASSIGN_OR_RETURN(p.baseboard, ReadBaseboard(r));
      ONCE_ASSIGN_OR_RETURN(p.reset_nonce, ReadId<Nonce>(r));
      return p;
    }
    default:
      return MakeError(ErrorCode::kInvalidArgument, "unknown request kind " + std::to_string(kind));
  }
}

// ---- events ----

void WriteSummary(Writer& w, const OutputSummary& s) {
  w.U64(s.bytes);
  w.Raw(s.hash);
}

Result<OutputSummary> ReadSummary(Reader& r) {
  OutputSummary s;
  ONCE_ASSIGN_OR_RETURN(s.bytes, r.U64());
  ONCE_ASSIGN_OR_RETURN(s.hash, r.Fixed<32>());
  return s;
}

struct MessageWriter {
  Writer& w;
  Status Head(uint8_t kind, const std::string& baseboard) {
    w.U8(kind);
    return w.String(baseboard, "baseboard_bytes_max", kBaseboardBytesMax);
  }
  Status operator()(const SignedRequest& m) {
    w.U8(kRequestKind);
    ONCE_RETURN_IF_ERROR(w.Blob(m.payload_bytes, "request_bytes_max", kRequestBytesMax));
    w.Raw(m.key_id.bytes);
    w.Raw(m.signature);
    return Ok();
  }
  Status operator()(const JobStarted& m) {
    ONCE_RETURN_IF_ERROR(Head(kJobStartedKind, m.baseboard));
    w.Raw(m.job_id.bytes);
    return Ok();
  }
  Status operator()(const JobStopped& m) {
    ONCE_RETURN_IF_ERROR(Head(kJobStoppedKind, m.baseboard));
    w.Raw(m.job_id.bytes);
    w.U8(static_cast<uint8_t>(m.outcome.kind));
    w.U32(static_cast<uint32_t>(m.outcome.code));
    ONCE_RETURN_IF_ERROR(w.String(m.outcome.error, "error_text_bytes_max", kErrorTextBytesMax));
    WriteSummary(w, m.stdout_summary);
    WriteSummary(w, m.stderr_summary);
    return Ok();
  }
  Status operator()(const JobCancelled& m) {
    ONCE_RETURN_IF_ERROR(Head(kJobCancelledKind, m.baseboard));
    w.Raw(m.job_id.bytes);
    return Ok();
  }
  Status operator()(const JobError& m) {
    ONCE_RETURN_IF_ERROR(Head(kJobErrorKind, m.baseboard));
    w.Raw(m.job_id.bytes);
    w.U8(static_cast<uint8_t>(m.code));
    return w.String(m.message, "error_text_bytes_max", kErrorTextBytesMax);
  }
  Status operator()(const SledError& m) {
    ONCE_RETURN_IF_ERROR(Head(kSledErrorKind, m.baseboard));
    w.U8(static_cast<uint8_t>(m.kind));
    w.Raw(m.first.bytes);
    w.Raw(m.second.bytes);
    w.Raw(m.marker.bytes);
    w.U32(m.count);
    return w.String(m.message, "error_text_bytes_max", kErrorTextBytesMax);
  }
  Status operator()(const JobSkipped& m) {
    ONCE_RETURN_IF_ERROR(Head(kJobSkippedKind, m.baseboard));
    w.Raw(m.job_id.bytes);
    w.U8(static_cast<uint8_t>(m.reason));
    return w.String(m.detail, "error_text_bytes_max", kErrorTextBytesMax);
  }
  Status operator()(const JobInterrupted& m) {
    ONCE_RETURN_IF_ERROR(Head(kJobInterruptedKind, m.baseboard));
    w.Raw(m.job_id.bytes);
    return Ok();
  }
  Status operator()(const LifeMarker& m) {
    ONCE_RETURN_IF_ERROR(Head(kLifeMarkerKind, m.baseboard));
    w.Raw(m.nonce.bytes);
    return Ok();
  }
  Status operator()(const VersionAnnouncement& m) {
    ONCE_RETURN_IF_ERROR(Head(kVersionKind, m.baseboard));
    w.U8(m.cubby);
    return w.String(m.build_version, "build_version_bytes_max", kBuildVersionBytesMax);
  }
};

Result<SignedRequest> ReadRequest(Reader& r) {
  SignedRequest m;
  ONCE_ASSIGN_OR_RETURN(m.payload_bytes, r.Blob("request_bytes_max", kRequestBytesMax));
  ONCE_ASSIGN_OR_RETURN(m.payload, DecodePayload(m.payload_bytes));
  ONCE_ASSIGN_OR_RETURN(m.key_id, ReadId<KeyId>(r));
  ONCE_ASSIGN_OR_RETURN(m.signature, r.Fixed<64>());
  return m;
}

Result<ExitOutcome> ReadOutcome(Reader& r) {
  ExitOutcome o;
  ONCE_ASSIGN_OR_RETURN(uint8_t kind, r.U8());
  if (kind < 1 || kind > 3) return MakeError(ErrorCode::kInvalidArgument, "unknown exit kind");
  o.kind = static_cast<ExitOutcome::Kind>(kind);
  ONCE_ASSIGN_OR_RETURN(uint32_t code, r.U32());
  o.code = static_cast<int32_t>(code);
  ONCE_ASSIGN_OR_RETURN(o.error, r.String("error_text_bytes_max", kErrorTextBytesMax));
  return o;
}

Result<Message> ReadEvent(Reader& r, uint8_t kind) {
  ONCE_ASSIGN_OR_RETURN(std::string baseboard, ReadBaseboard(r));
  switch (kind) {
    case kJobStartedKind: {
      ONCE_ASSIGN_OR_RETURN(JobId id, ReadId<JobId>(r));
      return JobStarted{baseboard, id};
    }
    case kJobStoppedKind: {
      JobStopped m;
      m.baseboard = baseboard;
      ONCE_ASSIGN_OR_RETURN(m.job_id, ReadId<JobId>(r));
      ONCE_ASSIGN_OR_RETURN(m.outcome, ReadOutcome(r));
      ONCE_ASSIGN_OR_RETURN(m.stdout_summary, ReadSummary(r));
      ONCE_ASSIGN_OR_RETURN(m.stderr_summary, ReadSummary(r));
      return m;
    }
    case kJobCancelledKind: {
      ONCE_ASSIGN_OR_RETURN(JobId id, ReadId<JobId>(r));
      return JobCancelled{baseboard, id};
    }
    case kJobErrorKind: {
      JobError m;
      m.baseboard = baseboard;
      ONCE_ASSIGN_OR_RETURN(m.job_id, ReadId<JobId>(r));
      ONCE_ASSIGN_OR_RETURN(uint8_t code, r.U8());
      if (code > static_cast<uint8_t>(ErrorCode::kInternal)) {
        return MakeError(ErrorCode::kInvalidArgument, "unknown error code");
      }
      m.code = static_cast<ErrorCode>(code);
      ONCE_ASSIGN_OR_RETURN(m.message, r.String("error_text_bytes_max", kErrorTextBytesMax));
      return m;
    }
    case kSledErrorKind: {
      SledError m;
      m.baseboard = baseboard;
      ONCE_ASSIGN_OR_RETURN(uint8_t sled_kind, r.U8());
      if (sled_kind < static_cast<uint8_t>(SledErrorKind::kConcurrentSessions) ||
          sled_kind > static_cast<uint8_t>(SledErrorKind::kBoundaryReset)) {
        return MakeError(ErrorCode::kInvalidArgument, "unknown sled error kind");
      }
      m.kind = static_cast<SledErrorKind>(sled_kind);
      ONCE_ASSIGN_OR_RETURN(m.first, ReadId<SessionId>(r));
      ONCE_ASSIGN_OR_RETURN(m.second, ReadId<SessionId>(r));
      ONCE_ASSIGN_OR_RETURN(m.marker, ReadId<Nonce>(r));
      ONCE_ASSIGN_OR_RETURN(m.count, r.U32());
      ONCE_ASSIGN_OR_RETURN(m.message, r.String("error_text_bytes_max", kErrorTextBytesMax));
      return m;
    }
    case kJobSkippedKind: {
      JobSkipped m;
      m.baseboard = baseboard;
      ONCE_ASSIGN_OR_RETURN(m.job_id, ReadId<JobId>(r));
      ONCE_ASSIGN_OR_RETURN(uint8_t reason, r.U8());
      if (reason < static_cast<uint8_t>(SkipReason::kLightcone) ||
          reason > static_cast<uint8_t>(SkipReason::kUntrusted)) {
        return MakeError(ErrorCode::kInvalidArgument, "unknown skip reason");
      }
      m.reason = static_cast<SkipReason>(reason);
      ONCE_ASSIGN_OR_RETURN(m.detail, r.String("error_text_bytes_max", kErrorTextBytesMax));
      return m;
    }
    case kJobInterruptedKind: {
      ONCE_ASSIGN_OR_RETURN(JobId id, ReadId<JobId>(r));
      return JobInterrupted{baseboard, id};
    }
    case kLifeMarkerKind: {
      ONCE_ASSIGN_OR_RETURN(Nonce nonce, ReadId<Nonce>(r));
      return LifeMarker{baseboard, nonce};
    }
    case kVersionKind: {
      VersionAnnouncement m;
      m.baseboard = baseboard;
      ONCE_ASSIGN_OR_RETURN(m.cubby, r.U8());
      if (m.cubby > kCubbyMax && m.cubby != kCubbyUnknown) {
        return MakeError(ErrorCode::kInvalidArgument, "cubby out of range");
      }
      ONCE_ASSIGN_OR_RETURN(m.build_version,
                            r.String("build_version_bytes_max", kBuildVersionBytesMax));
      return m;
    }
    default:
      return MakeError(ErrorCode::kInvalidArgument, "unknown message kind " + std::to_string(kind));
  }
}

}  // namespace

std::string_view SkipReasonName(SkipReason reason) {
  switch (reason) {
    case SkipReason::kLightcone:
      return "lightcone";
    case SkipReason::kAlreadyExecuted:
      return "already executed";
    case SkipReason::kUntrusted:
      return "untrusted";
  }
  return "?";
}

std::string_view SledErrorKindName(SledErrorKind kind) {
  switch (kind) {
    case SledErrorKind::kConcurrentSessions:
      return "ConcurrentSessions";
    case SledErrorKind::kSessionHop:
      return "SessionHop";
    case SledErrorKind::kUniverseFlipFlop:
      return "UniverseFlipFlop";
    case SledErrorKind::kUntrusted:
      return "Untrusted";
    case SledErrorKind::kUniverseDropped:
      return "UniverseDropped";
    case SledErrorKind::kBoundaryReset:
      return "BoundaryReset";
  }
  return "?";
}

Result<Bytes> EncodePayload(const RequestPayload& payload) {
  Writer w;
  w.U8(kPayloadFormat);
  ONCE_RETURN_IF_ERROR(std::visit(PayloadWriter{w}, payload));
  Bytes out = w.Take();
  ONCE_RETURN_IF_ERROR(wire::CheckSize("request_bytes_max", out.size(), kRequestBytesMax));
  return out;
}

Result<RequestPayload> DecodePayload(std::span<const uint8_t> bytes) {
  ONCE_RETURN_IF_ERROR(wire::CheckSize("request_bytes_max", bytes.size(), kRequestBytesMax));
  Reader r(bytes);
  ONCE_ASSIGN_OR_RETURN(uint8_t format, r.U8());
  if (format != kPayloadFormat) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "unknown request format " + std::to_string(format));
  }
  ONCE_ASSIGN_OR_RETURN(uint8_t kind, r.U8());
  ONCE_ASSIGN_OR_RETURN(RequestPayload payload, ReadPayloadBody(r, kind));
  ONCE_RETURN_IF_ERROR(r.End());
  return payload;
}

Result<Bytes> Encode(const Message& message) {
  Writer w;
  w.U8(kMessageFormat);
  ONCE_RETURN_IF_ERROR(std::visit(MessageWriter{w}, message));
  Bytes out = w.Take();
  ONCE_RETURN_IF_ERROR(wire::CheckSize("message_bytes_max", out.size(), kMessageBytesMax));
  return out;
}

Result<Message> Decode(std::span<const uint8_t> bytes) {
  ONCE_RETURN_IF_ERROR(wire::CheckSize("message_bytes_max", bytes.size(), kMessageBytesMax));
  Reader r(bytes);
  ONCE_ASSIGN_OR_RETURN(uint8_t format, r.U8());
  if (format != kMessageFormat) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "unknown message format " + std::to_string(format));
  }
  ONCE_ASSIGN_OR_RETURN(uint8_t kind, r.U8());
  Message message;
  if (kind == kRequestKind) {
    ONCE_ASSIGN_OR_RETURN(message, ReadRequest(r));
  } else {
    ONCE_ASSIGN_OR_RETURN(message, ReadEvent(r, kind));
  }
  ONCE_RETURN_IF_ERROR(r.End());
  return message;
}

Bytes ToBeSigned(std::span<const uint8_t> payload_bytes) {
  Bytes out(kSigningContext.begin(), kSigningContext.end());
  out.push_back(0);
  out.insert(out.end(), payload_bytes.begin(), payload_bytes.end());
  return out;
}

Digest256 ToBeSignedDigest(const SignedRequest& request) {
  return Blake2b256({ToBeSigned(request.payload_bytes)});
}

Result<SignedRequest> Sign(const RequestPayload& payload, const KeyPair& keys) {
  SignedRequest request;
  request.payload = payload;
  ONCE_ASSIGN_OR_RETURN(request.payload_bytes, EncodePayload(payload));
  request.key_id = keys.id();
  request.signature = SignBytes(ToBeSigned(request.payload_bytes), keys.secret_key);
  return request;
}

Result<RequestPayload> Verify(const SignedRequest& request, const TrustedKeys& trusted) {
  const PublicKey* key = trusted.Find(request.key_id);
  if (key == nullptr) {
    return MakeError(ErrorCode::kPermissionDenied, "unknown key", request.key_id.ToString());
  }
  const Bytes signed_bytes = ToBeSigned(request.payload_bytes);
  VerifiedSignatures* verified = trusted.verified();
  Digest256 entry{};
  if (verified != nullptr) entry = Blake2b256({*key, request.signature, signed_bytes});
  if (verified == nullptr || !verified->Contains(entry)) {
    ONCE_RETURN_IF_ERROR(VerifyBytes(signed_bytes, request.signature, *key));
    if (verified != nullptr) verified->Insert(entry);
  }
  ONCE_ASSIGN_OR_RETURN(RequestPayload decoded, DecodePayload(request.payload_bytes));
  if (!(decoded == request.payload)) {
    return MakeError(ErrorCode::kInvalidArgument, "payload does not match its signed bytes");
  }
  return decoded;
}

const JobStart* AsJobStart(const SignedRequest& request) {
  return std::get_if<JobStart>(&request.payload);
}

}  // namespace once::rack
