// A PGresult of text columns built in memory with libpq's own constructors
// (PQmakeEmptyPGresult, PQsetResultAttrs, PQsetvalue), as a statement would
// have answered: for the store's row decoders without a server
// (store_postgres_rows_fuzz, store_postgres_decode_test).

#pragma once

#include <libpq-fe.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace once::store::pg {

struct ResultFree {
  void operator()(PGresult* r) const { PQclear(r); }
};
using OwnedResult = std::unique_ptr<PGresult, ResultFree>;

// `columns` text columns holding `rows` (a short row's missing values, and
// a value that is exactly \N, are NULL); null if libpq refused to build it.
inline OwnedResult MakeTextResult(const std::vector<std::vector<std::string_view>>& rows,
                                  int columns) {
  OwnedResult res(PQmakeEmptyPGresult(nullptr, PGRES_TUPLES_OK));
  if (!res) return nullptr;
  std::vector<std::string> names;
  std::vector<PGresAttDesc> attrs(static_cast<size_t>(columns));
  for (int c = 0; c < columns; ++c) names.push_back("c" + std::to_string(c));
  for (int c = 0; c < columns; ++c) {
    attrs[c].name = names[c].data();
    attrs[c].format = 0;
    attrs[c].typid = 25;  // text
    attrs[c].typlen = -1;
    attrs[c].atttypmod = -1;
  }
  if (!PQsetResultAttrs(res.get(), columns, attrs.data())) return nullptr;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int c = 0; c < columns; ++c) {
      const bool null = static_cast<size_t>(c) >= rows[r].size() || rows[r][c] == "\\N";
      const std::string_view v = null ? std::string_view() : rows[r][c];
      // PQsetvalue copies the bytes (and adds the terminating zero); a
      // length of -1 is NULL.
      if (!PQsetvalue(res.get(), static_cast<int>(r), c,
                      const_cast<char*>(v.empty() ? "" : v.data()),
                      null ? -1 : static_cast<int>(v.size()))) {
        return nullptr;
      }
    }
  }
  return res;
}

}  // namespace once::store::pg
