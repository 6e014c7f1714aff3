#include "once/rack/boundary.h"

namespace once::rack {

Status MemoryBoundaryStore::Record(const BoundaryRecord& record) {
  if (fail_next_) {
    Error error = std::move(*fail_next_);
    fail_next_.reset();
    return std::unexpected(std::move(error));
  }
  records_.push_back(record);
  return Ok();
}

}  // namespace once::rack
