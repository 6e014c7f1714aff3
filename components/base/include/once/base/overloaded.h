// File: overloaded.h
//
// A visitor made of lambdas, one per alternative of a std::variant.
//
//   std::visit(Overloaded{[](const Crash& c) { ... }, [](const auto&) { ... }}, step);

#pragma once

namespace once {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
// Deduces F from the lambdas (implicit for aggregates only since C++20's
// P1816, which clang 14, the fuzz build's compiler, lacks).
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace once
