#include "once/allocator/settings.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace once::allocator {

void ApplySettings(char** argv) {
#ifdef ONCE_MALLOC_TCMALLOC
  if (std::getenv(kTransferObjectsVariable) != nullptr) return;  // set by the caller, or by us
  if (kTransferObjects == kTransferObjectsDefault) return;       // tcmalloc's own: nothing to do
  std::string value = std::to_string(kTransferObjects);
  if (setenv(kTransferObjectsVariable, value.c_str(), /*overwrite=*/0) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: keep the defaults
#else
  (void)argv;
#endif
}

std::string TransferObjectsInForce() {
#ifdef ONCE_MALLOC_TCMALLOC
  const char* transfer = std::getenv(kTransferObjectsVariable);
  return transfer != nullptr ? transfer : std::to_string(kTransferObjectsDefault);
#else
  return "-";
#endif
}

std::string Description() {
#ifdef ONCE_MALLOC_TCMALLOC
  const char* transfer = std::getenv(kTransferObjectsVariable);
  return std::string("tcmalloc, ") + kTransferObjectsVariable + "=" +
         (transfer != nullptr ? transfer : "unset (" + TransferObjectsInForce() + ")");
#else
  return "system (glibc)";
#endif
}

}  // namespace once::allocator
