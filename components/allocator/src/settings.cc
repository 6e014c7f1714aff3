#include "once/allocator/settings.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>

#include "map_aligned.h"

#ifdef ONCE_MALLOC_TCMALLOC
#include <gperftools/malloc_extension.h>
#endif

namespace once::allocator {
namespace {

std::atomic<bool> huge_page_regions{false};

#ifdef ONCE_MALLOC_TCMALLOC

// tcmalloc's system allocator, in whole aligned huge-page regions (see the
// header). Called by tcmalloc under its page heap's lock: it makes system
// calls only, never an allocation.
class HugePageRegions final : public SysAllocator {
 public:
  explicit HugePageRegions(SysAllocator* fallback) : fallback_(fallback) {}

  void* Alloc(size_t size, size_t* actual_size, size_t alignment) override {
    // tcmalloc always passes actual_size (it takes the rest of a region);
    // a caller that did not could not use it.
    if (actual_size == nullptr || alignment > kRegion || size == 0 || size > kSizeMax) {
      return fallback_->Alloc(size, actual_size, alignment);
    }
    const size_t rounded = (size + kRegion - 1) & ~(kRegion - 1);
    void* region = internal::MapHugePageRegion(rounded);
    if (region == nullptr) return fallback_->Alloc(size, actual_size, alignment);
    *actual_size = rounded;
    return region;
  }

 private:
  static constexpr size_t kRegion = kHugePageRegionBytes;
  static constexpr size_t kSizeMax = size_t{1} << 40;

  SysAllocator* const fallback_;
};

bool HugePagesWanted() {
  const char* value = std::getenv(kHugePagesVariable);
  return value == nullptr || std::string_view(value) != "0";
}

// Installs HugePageRegions once; never destroyed (tcmalloc may call it until
// the process ends).
void InstallHugePageRegions() {
  if (!HugePagesWanted() || huge_page_regions.load()) return;
  // tcmalloc sets up its own system allocator at its first growth (which
  // would replace one installed before it): an allocation makes sure it
  // has happened.
  void* volatile probe = std::malloc(1);  // volatile: not elided with the free
  std::free(probe);
  MallocExtension* tcmalloc = MallocExtension::instance();
  SysAllocator* own = tcmalloc->GetSystemAllocator();
  if (own == nullptr || huge_page_regions.exchange(true)) return;
  alignas(HugePageRegions) static unsigned char storage[sizeof(HugePageRegions)];
  tcmalloc->SetSystemAllocator(new (storage) HugePageRegions(own));
}

#endif  // ONCE_MALLOC_TCMALLOC

}  // namespace

void ApplySettings(char** argv) {
#ifdef ONCE_MALLOC_TCMALLOC
  if (std::getenv(kTransferObjectsVariable) == nullptr &&
      kTransferObjects != kTransferObjectsDefault) {
    std::string value = std::to_string(kTransferObjects);
    if (setenv(kTransferObjectsVariable, value.c_str(), /*overwrite=*/0) == 0) {
      execv("/proc/self/exe", argv);  // returns only on failure: keep the defaults
    }
  }
  InstallHugePageRegions();
#else
  (void)argv;
#endif
}

bool HugePageRegionsInForce() { return huge_page_regions.load(); }

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
         (transfer != nullptr ? transfer : "unset (" + TransferObjectsInForce() + ")") +
         (HugePageRegionsInForce() ? ", huge-page regions" : ", 4 KiB pages");
#else
  return "system (glibc)";
#endif
}

}  // namespace once::allocator
