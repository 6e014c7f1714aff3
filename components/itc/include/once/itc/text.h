// File: text.h
//
// The paper's text notation. A party is `0`, `1` or `(left,right)`; a version
// is a height `5` or `(base,left,right)` where the children's heights are
// relative to the base. Whitespace between tokens is allowed. Parsing
// normalises (so `(1,1)` is the party `1` and `(0,2,2)` the version `2`);
// formatting always prints the canonical form.
//
//   ONCE_ASSIGN_OR_RETURN(Party p, ParseParty("(1,(0,1))"));
//   ONCE_ASSIGN_OR_RETURN(Version v, ParseVersion("(1,0,(0,1,0))"));
//   std::string s = FormatVersion(v);   // "(1,0,(0,1,0))"
//
// Errors: kInvalidArgument for malformed text (with the byte offset), for a
// number past 2^64-1 and for the empty party `0`; kLimitExceeded for text
// longer than kTextBytesMax or deeper than kTreeDepthMax.

#pragma once

#include <string>
#include <string_view>

#include "once/base/result.h"
#include "once/itc/party.h"
#include "once/itc/version.h"

namespace once::itc {

Result<Party> ParseParty(std::string_view text);
Result<Version> ParseVersion(std::string_view text);
std::string FormatParty(const Party& party);
std::string FormatVersion(const Version& version);

}  // namespace once::itc
