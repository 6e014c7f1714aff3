// File: kind.h
//
// An event's kind. A kernel kind is held as its KernelKind (no allocation,
// and Is() is one compare); any other kind owns its name.
//
//   Kind step = KernelKind::kStepCompleted;   // "STEP_COMPLETED"
//   Kind app = "order.charged";               // owned
//   std::string_view name = step;             // every kind reads as its name
//   if (step.Is(KernelKind::kStepCompleted)) { ... }
//
// Kinds compare by name: Kind("STEP_COMPLETED") == Kind(KernelKind::kStepCompleted).

#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include "once/events/kinds.h"

namespace once::events {

class Kind {
 public:
  Kind() = default;
  Kind(KernelKind kind) : kernel_(kind) {}            // NOLINT: implicit by design
  Kind(const char* name) : name_(name) {}             // NOLINT
  Kind(std::string_view name) : name_(name) {}        // NOLINT
  Kind(std::string name) : name_(std::move(name)) {}  // NOLINT

  // A name read from storage: a kernel kind's name becomes its KernelKind.
  static Kind FromStored(std::string name);

  std::string_view view() const { return kernel_ ? Name(*kernel_) : std::string_view(name_); }
  operator std::string_view() const { return view(); }  // NOLINT
  std::string str() const { return std::string(view()); }
  size_t size() const { return view().size(); }
  bool empty() const { return view().empty(); }

  // Whether this is kernel kind k (by name, however it was made).
  bool Is(KernelKind k) const { return kernel_ ? *kernel_ == k : name_ == Name(k); }
  // Set when made from a KernelKind or read back as one: its name is one of
  // kKernelKinds and was checked when the table was built.
  std::optional<KernelKind> interned() const { return kernel_; }

  friend bool operator==(const Kind& a, const Kind& b) { return a.view() == b.view(); }
  friend bool operator==(const Kind& a, std::string_view b) { return a.view() == b; }
  friend bool operator==(const Kind& a, const char* b) { return a.view() == b; }
  friend bool operator==(const Kind& a, const std::string& b) { return a.view() == b; }

 private:
  std::optional<KernelKind> kernel_;
  std::string name_;
};

std::ostream& operator<<(std::ostream& os, const Kind& kind);
std::string operator+(std::string text, const Kind& kind);

}  // namespace once::events
