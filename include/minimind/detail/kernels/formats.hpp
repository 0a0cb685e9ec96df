#pragma once
// The one list of weight formats (format.hpp says what each provides). Adding a format: its file
// with its Format traits, its WeightFormat value, and its entry here.
#include "minimind/detail/kernels/bf16.hpp"
#include "minimind/detail/kernels/f32.hpp"
#include "minimind/detail/kernels/f32_panels.hpp"
#include "minimind/detail/kernels/format.hpp"
#include "minimind/detail/kernels/q4.hpp"
#include "minimind/detail/kernels/ggml.hpp"
#include "minimind/detail/kernels/q8.hpp"
#include "minimind/error.hpp"

#include <string>
#include <string_view>

namespace minimind {
namespace kernels {

template <class... Fs>
struct FormatList {};
using Formats = FormatList<f32::Format, bf16::Format, q8::Format, f32_panels::Format, q4::Format, ggml::Format>;

namespace format_detail {
template <class F, class... Rest, class Fn>
decltype(auto) visit(WeightFormat format, Fn& fn) {
  if constexpr (sizeof...(Rest) == 0) {
    return fn.template operator()<F>();  // every WeightFormat is listed: the last one is this
  } else {
    if (format == F::id) return fn.template operator()<F>();
    return visit<Rest...>(format, fn);
  }
}
template <class... Fs, class Fn>
decltype(auto) visit_list(FormatList<Fs...>, WeightFormat format, Fn& fn) {
  return visit<Fs...>(format, fn);
}
template <class... Fs>
constexpr bool in_enum_order(FormatList<Fs...>) {
  int i = 0;
  return ((static_cast<int>(Fs::id) == i++) && ...);
}
static_assert(in_enum_order(Formats{}), "the list holds the WeightFormat values in order");
template <class... Fs, class Fn>
void each(FormatList<Fs...>, Fn& fn) {
  (fn.template operator()<Fs>(), ...);
}
}  // namespace format_detail

// fn.template operator()<F>() for the traits F of `format`: the one place a format is dispatched.
template <class Fn>
decltype(auto) with_format(WeightFormat format, Fn&& fn) {
  return format_detail::visit_list(Formats{}, format, fn);
}
// fn.template operator()<F>() for every format, in the list's order.
template <class Fn>
void each_format(Fn&& fn) {
  format_detail::each(Formats{}, fn);
}

}  // namespace kernels

inline const char* format_name(WeightFormat format) {
  return kernels::with_format(format, []<class F>() { return F::name; });
}

inline WeightFormat parse_format(std::string_view name) {
  WeightFormat found{};
  bool known = false;
  std::string names;
  kernels::each_format([&]<class F>() {
    if (name == F::name) found = F::id, known = true;
    names += (names.empty() ? "" : ", ") + std::string(F::name);
  });
  if (!known) throw Error("unknown weight format \"" + std::string(name) + "\" (use one of " + names + ")");
  return found;
}

}  // namespace minimind
