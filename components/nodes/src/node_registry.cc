#include "once/nodes/node_registry.h"

#include "once/store/event_store.h"
#include "once/store/validate.h"

namespace once::nodes {

Status ValidateNodeId(std::string_view node_id, const NodeLimits& limits) {
  store::Limits ids;
  ids.execution_id_bytes_max = limits.node_id_bytes_max;
  return store::ValidateOwner(node_id, ids);
}

Status ValidateNodeInfo(const NodeInfo& node, const NodeLimits& limits) {
  ONCE_RETURN_IF_ERROR(ValidateNodeId(node.node_id, limits));
  store::Limits texts;
  texts.execution_id_bytes_max = limits.node_text_bytes_max;
  for (const std::string* text : {&node.host, &node.version}) {
    if (text->size() > limits.node_text_bytes_max) {
      return LimitError("node_text_bytes_max", static_cast<int64_t>(text->size()),
                        static_cast<int64_t>(limits.node_text_bytes_max), node.node_id);
    }
    if (!text->empty()) ONCE_RETURN_IF_ERROR(store::ValidateOwner(*text, texts));
  }
  if (node.pid < 0) return MakeError(ErrorCode::kInvalidArgument, "pid must be >= 0", node.node_id);
  return Ok();
}

Status ValidateLease(int64_t lease_ms) {
  if (lease_ms <= 0) return MakeError(ErrorCode::kInvalidArgument, "lease_ms must be > 0");
  return Ok();
}

}  // namespace once::nodes
