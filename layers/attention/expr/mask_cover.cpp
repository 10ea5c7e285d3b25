// Which pairs of a box a mask expression hides (expr.h mask_cover): interval arithmetic over
// integers and three-valued logic, so the CUDA host can skip the tiles a mask hides whole
// (ARCHITECTURE.md "Score modifiers"). Proven only where the kernels compute exactly: integer
// arithmetic (exact in 32 or 64 bits, emit_cuda.cpp); reals and table entries stay unknown.
#include <algorithm>
#include <cmath>

#include "engine/core/error.h"
#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr {
namespace {

// Bounds of an integer; empty-free, "unknown" is (-inf, inf). Past 2^52 a double no longer
// holds every integer, so such bounds become unknown rather than rounded.
struct Range {
  double lo = -INFINITY, hi = INFINITY;
  bool point() const { return lo == hi; }
};
constexpr double kExact = 4503599627370496.0;  // 2^52
Range checked(double lo, double hi) {
  if (!(lo >= -kExact && hi <= kExact)) return {};
  return {lo, hi};
}
Range unknown() {
  return {};
}

// The truth values a boolean can take over the box (both: mixed or not proven).
struct Truth {
  bool can_true = true, can_false = true;
};

struct Cover {
  const PairBox& box;

  Range range(const Node& n) const {
    if (n.type != Type::integer) return unknown();
    auto r = [&](size_t i) { return range(*n.args[i]); };
    switch (n.op) {
      case Op::literal:
        return checked(n.value, n.value);
      case Op::q:
        return checked(double(box.q0), double(box.q1));
      case Op::k:
        return checked(double(box.k0), double(box.k1));
      case Op::h:
        return checked(double(box.h0), double(box.h1));
      case Op::neg: {
        const Range a = r(0);
        return checked(-a.hi, -a.lo);
      }
      case Op::add: {
        const Range a = r(0), b = r(1);
        return checked(a.lo + b.lo, a.hi + b.hi);
      }
      case Op::sub: {
        const Range a = r(0), b = r(1);
        return checked(a.lo - b.hi, a.hi - b.lo);
      }
      case Op::mul: {
        const Range a = r(0), b = r(1);
        if (!std::isfinite(a.lo + a.hi + b.lo + b.hi)) return unknown();
        const double c[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
        return checked(*std::min_element(c, c + 4), *std::max_element(c, c + 4));
      }
      case Op::abs: {
        const Range a = r(0);
        if (a.lo >= 0) return a;
        if (a.hi <= 0) return checked(-a.hi, -a.lo);
        return checked(0, std::max(-a.lo, a.hi));
      }
      case Op::min: {
        const Range a = r(0), b = r(1);
        return checked(std::min(a.lo, b.lo), std::min(a.hi, b.hi));
      }
      case Op::max: {
        const Range a = r(0), b = r(1);
        return checked(std::max(a.lo, b.lo), std::max(a.hi, b.hi));
      }
      case Op::clamp: {  // x < lo ? lo : (x > hi ? hi : x), as the kernels and the CPU
        const Range x = r(0), lo = r(1), hi = r(2);
        if (lo.hi <= hi.lo)  // ordered bounds: min(max(x, lo), hi), increasing in each
          return checked(std::min(std::max(x.lo, lo.lo), hi.lo),
                         std::min(std::max(x.hi, lo.hi), hi.hi));
        return checked(std::min({x.lo, lo.lo, hi.lo}), std::max({x.hi, lo.hi, hi.hi}));
      }
      case Op::where: {
        const Truth c = truth(*n.args[0]);
        const Range a = r(1), b = r(2);
        if (!c.can_false) return a;
        if (!c.can_true) return b;
        return checked(std::min(a.lo, b.lo), std::max(a.hi, b.hi));
      }
      default:  // rounding of reals: not proven
        return unknown();
    }
  }

  Truth truth(const Node& n) const {
    auto cmp = [&](auto always, auto never) -> Truth {
      const Node &x = *n.args[0], &y = *n.args[1];
      if (x.type != Type::integer || y.type != Type::integer) return {};
      const Range a = range(x), b = range(y);
      return {!never(a, b), !always(a, b)};
    };
    switch (n.op) {
      case Op::lt:
        return cmp([](Range a, Range b) { return a.hi < b.lo; },
                   [](Range a, Range b) { return a.lo >= b.hi; });
      case Op::le:
        return cmp([](Range a, Range b) { return a.hi <= b.lo; },
                   [](Range a, Range b) { return a.lo > b.hi; });
      case Op::gt:
        return cmp([](Range a, Range b) { return a.lo > b.hi; },
                   [](Range a, Range b) { return a.hi <= b.lo; });
      case Op::ge:
        return cmp([](Range a, Range b) { return a.lo >= b.hi; },
                   [](Range a, Range b) { return a.hi < b.lo; });
      case Op::eq:
        return cmp([](Range a, Range b) { return a.point() && b.point() && a.lo == b.lo; },
                   [](Range a, Range b) { return a.hi < b.lo || b.hi < a.lo; });
      case Op::ne:
        return cmp([](Range a, Range b) { return a.hi < b.lo || b.hi < a.lo; },
                   [](Range a, Range b) { return a.point() && b.point() && a.lo == b.lo; });
      case Op::land: {
        const Truth a = truth(*n.args[0]), b = truth(*n.args[1]);
        return {a.can_true && b.can_true, a.can_false || b.can_false};
      }
      case Op::lor: {
        const Truth a = truth(*n.args[0]), b = truth(*n.args[1]);
        return {a.can_true || b.can_true, a.can_false && b.can_false};
      }
      case Op::lnot: {
        const Truth a = truth(*n.args[0]);
        return {a.can_false, a.can_true};
      }
      default:
        return {};
    }
  }
};

}  // namespace

MaskCover mask_cover(const Program& mask, const PairBox& box) {
  DL_CHECK(mask.is_mask && mask.root, "mask_mod", "mask_cover takes a mask expression");
  DL_CHECK(box.q0 <= box.q1 && box.k0 <= box.k1 && box.h0 <= box.h1, "mask_mod",
           "an empty box of pairs: q [" << box.q0 << ", " << box.q1 << "], k [" << box.k0 << ", "
                                        << box.k1 << "], h [" << box.h0 << ", " << box.h1 << "]");
  const Truth t = Cover{box}.truth(*mask.root);
  if (!t.can_true) return MaskCover::hidden;
  if (!t.can_false) return MaskCover::visible;
  return MaskCover::mixed;
}

}  // namespace driftless::layers::expr
