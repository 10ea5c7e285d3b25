// Where the CUDA kernels' float value of a score expression can lie (expr.h value_range):
// interval arithmetic over its real subexpressions, each operation as emit_cuda.cpp writes it,
// so that only an expression whose value may be -inf pays for the guard that makes it NaN
// (docs/guarantees.md "Scores are finite or reported"; ARCHITECTURE.md "Score modifiers").
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "layers/attention/expr/expr.h"
#include "layers/attention/expr/fold.h"
#include "layers/attention/expr/typer.h"

namespace driftless::layers::expr {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// A float result past kBig in magnitude may be +-inf. Floats end at 2^128; the margin covers
// each operation's rounding and the fast approximations' few ulp. __fdividef is 0 for a
// divisor past 2^126, which this bound widens to inf.
constexpr double kBig = 0x1p116;
// A result within kTiny of 0 may be 0 (the fast approximations flush denormals to zero, and
// __fdividef of a divisor past 2^126 is 0): log and division take such an operand as 0, and
// a folded constant that small may be 0.
constexpr double kTiny = 0x1p-100;
// The softmax scale the folded constants are sound for: the kernels multiply the raw dot
// product (score / scale) by a constant that holds the scale (emit_cuda.cpp chain).
constexpr double kMinScale = 0x1p-8, kMaxScale = 0x1p8;

RealRange unknown() {
  return {-kInf, kInf, true};
}
// Float overflow: past kBig a bound may round to infinity.
RealRange widen(RealRange r) {
  if (r.hi > kBig) r.hi = kInf;
  if (r.lo < -kBig) r.lo = -kInf;
  return r;
}
bool near_zero(const RealRange& r) {
  return r.lo <= kTiny && r.hi >= -kTiny;
}
double max_abs(const RealRange& r) {
  return std::max(std::fabs(r.lo), std::fabs(r.hi));
}
RealRange hull(const RealRange& a, const RealRange& b) {
  return {std::min(a.lo, b.lo), std::max(a.hi, b.hi), a.nan || b.nan};
}
RealRange point(double v) {
  return {v, v, false};
}
// A sum of bounds where inf - inf (NaN) may be anything: the least or the most.
double sum_lo(double x, double y) {
  const double s = x + y;
  return std::isnan(s) ? -kInf : s;
}
double sum_hi(double x, double y) {
  const double s = x + y;
  return std::isnan(s) ? kInf : s;
}
// A product of bounds with 0 * inf as 0, the limit of the products of finite values near them
// (where one of the values is an infinity the product is NaN, which the nan flag carries).
double times(double x, double y) {
  return x == 0 || y == 0 ? 0 : x * y;
}
RealRange mul(const RealRange& x, const RealRange& y) {
  const double c[4] = {times(x.lo, y.lo), times(x.lo, y.hi), times(x.hi, y.lo), times(x.hi, y.hi)};
  const bool zero_inf =
      (near_zero(x) && std::isinf(max_abs(y))) || (near_zero(y) && std::isinf(max_abs(x)));
  return widen(
      {*std::min_element(c, c + 4), *std::max_element(c, c + 4), x.nan || y.nan || zero_inf});
}
RealRange div(const RealRange& x, const RealRange& y) {
  if (near_zero(y)) return unknown();  // x / 0 is +-inf (or NaN)
  const double c[4] = {x.lo / y.lo, x.lo / y.hi, x.hi / y.lo, x.hi / y.hi};
  for (double v : c)
    if (std::isnan(v)) return unknown();  // inf / inf
  return widen({*std::min_element(c, c + 4), *std::max_element(c, c + 4), x.nan || y.nan});
}
// A folded constant may be flushed to 0 where it can be that small.
RealRange with_underflow(RealRange r) {
  if (r.lo > 0 && r.lo < kTiny) r.lo = 0;
  if (r.hi < 0 && r.hi > -kTiny) r.hi = 0;
  return r;
}

// Whether two subexpressions are the same (score * score is a square).
bool same(const Node& a, const Node& b) {
  if (a.op != b.op || a.type != b.type || a.value != b.value || a.param != b.param ||
      a.args.size() != b.args.size())
    return false;
  for (size_t i = 0; i < a.args.size(); ++i)
    if (!same(*a.args[i], *b.args[i])) return false;
  return true;
}

// The ranges of a score expression's nodes as the emitted code computes them: fold, the
// kernels' value_log2, whose product chains multiply their other factors in order and then one
// constant the host folded (emit_cuda.cpp chain); or the plain value, in the source's order.
struct Ranges {
  const Program& p;
  bool fold;
  detail::Typer typer{p.params, p.heads, p.is_mask};
  std::unordered_map<const Node*, RealRange> memo = {};

  RealRange of(const Node& n) {
    if (auto it = memo.find(&n); it != memo.end()) return it->second;
    RealRange r;
    if (fold && n.type == Type::real && (n.op == Op::mul || n.op == Op::div) && folds(n, false))
      r = chain(n, 1);
    else
      r = compute(n);
    memo[&n] = r;
    return r;
  }

  // Whether emit_cuda.cpp's chain folds n (with a starting constant, `init`, or without).
  static bool folds(const Node& n, bool init) {
    std::vector<detail::Factor> f;
    detail::collect_factors(n, f);
    bool consts = false, score = false;
    for (const detail::Factor& x : f) {
      consts = consts || x.kind == detail::Factor::mul_const || x.kind == detail::Factor::div_const;
      score = score || x.kind == detail::Factor::score;
    }
    return consts || (score && init);
  }
  // A folded chain: its other factors multiplied in order (the raw dot product for the
  // score), times the constant the host computes in float from `init`, the softmax scale and
  // the constant factors.
  RealRange chain(const Node& n, double init) {
    std::vector<detail::Factor> f;
    detail::collect_factors(n, f);
    RealRange k = point(init), prod{};
    bool any = false;
    auto times_prod = [&](const RealRange& r) {
      prod = any ? mul(prod, r) : r;
      any = true;
    };
    for (const detail::Factor& x : f) {
      switch (x.kind) {
        case detail::Factor::mul_const:
          k = with_underflow(mul(k, point(double(detail::const_value(*x.n)))));
          break;
        case detail::Factor::div_const:
          k = with_underflow(div(k, point(double(detail::const_value(*x.n)))));
          break;
        case detail::Factor::score:
          k = with_underflow(mul(k, {kMinScale, kMaxScale, false}));
          times_prod({-kModerate / kMinScale, kModerate / kMinScale, false});
          break;
        case detail::Factor::other:
          times_prod(of(*x.n));
          break;
      }
    }
    return any ? mul(prod, k) : k;
  }

  // The value in log2 units, as value_log2 returns it (fold), or the plain value.
  RealRange value() {
    if (!fold) return of(*p.root);
    if (folds(*p.root, true)) return chain(*p.root, detail::kLog2e);
    return mul(of(*p.root), point(detail::kLog2e));
  }

  RealRange compute(const Node& n) {
    if (n.type == Type::integer) {
      const detail::Interval i = typer.range(n);
      return {double(i.lo), double(i.hi), false};
    }
    if (n.type == Type::boolean) return {0, 1, false};  // never a real operand
    auto a = [&](size_t i) { return of(*n.args[i]); };
    switch (n.op) {
      case Op::literal: {
        const double v = double(float(n.value));  // the kernels read float(value)
        return {v, v, false};
      }
      case Op::to_real:
        return a(0);
      case Op::score:
      case Op::param:  // a table entry, of any value its table may hold at run time
        return {-kModerate, kModerate, false};
      case Op::neg: {
        const RealRange x = a(0);
        return {-x.hi, -x.lo, x.nan};
      }
      case Op::add:
      case Op::sub: {
        const RealRange x = a(0);
        RealRange y = a(1);
        if (n.op == Op::sub) y = {-y.hi, -y.lo, y.nan};
        const bool opposite = (x.hi == kInf && y.lo == -kInf) || (x.lo == -kInf && y.hi == kInf);
        return widen({sum_lo(x.lo, y.lo), sum_hi(x.hi, y.hi), x.nan || y.nan || opposite});
      }
      case Op::mul:
        if (same(*n.args[0], *n.args[1])) {  // x * x: a square
          const RealRange x = a(0);
          const double lo = x.lo > 0 ? x.lo * x.lo : (x.hi < 0 ? x.hi * x.hi : 0);
          return widen({lo, max_abs(x) * max_abs(x), x.nan});
        }
        return mul(a(0), a(1));
      case Op::div:
        return div(a(0), a(1));
      case Op::where:
        return hull(a(1), a(2));
      case Op::abs: {
        const RealRange x = a(0);
        if (x.lo >= 0) return x;
        if (x.hi <= 0) return {-x.hi, -x.lo, x.nan};
        return {0, std::max(-x.lo, x.hi), x.nan};
      }
      // dl_min(x, y) = y < x ? y : x and dl_max(x, y) = x < y ? y : x: where y is NaN the
      // result is x, whatever the other bound.
      case Op::min: {
        const RealRange x = a(0), y = a(1);
        RealRange r{std::min(x.lo, y.lo), std::min(x.hi, y.hi), x.nan};
        return y.nan ? hull(r, x) : r;
      }
      case Op::max: {
        const RealRange x = a(0), y = a(1);
        RealRange r{std::max(x.lo, y.lo), std::max(x.hi, y.hi), x.nan};
        return y.nan ? hull(r, x) : r;
      }
      case Op::clamp: {  // x < lo ? lo : (x > hi ? hi : x): one of the three
        const RealRange x = a(0), lo = a(1), hi = a(2);
        if (lo.nan || hi.nan) return hull(hull(x, lo), hi);
        return {std::min({lo.lo, hi.lo, std::max(x.lo, lo.lo)}),
                std::max({lo.hi, hi.hi, std::min(x.hi, hi.hi)}), x.nan};
      }
      case Op::exp: {
        const RealRange x = a(0);
        return widen({std::exp(x.lo), std::exp(x.hi), x.nan});
      }
      case Op::log: {  // __logf of 0 (or of a value flushed to it) is -inf
        const RealRange x = a(0);
        const double lo = x.lo <= kTiny ? -kInf : std::log(x.lo);
        const double hi = x.hi <= kTiny ? -kInf : std::log(x.hi);
        return {lo, hi, x.nan || x.lo < 0};
      }
      case Op::sqrt: {
        const RealRange x = a(0);
        return {std::sqrt(std::max(x.lo, 0.0)), std::sqrt(std::max(x.hi, 0.0)), x.nan || x.lo < 0};
      }
      case Op::tanh: {
        const RealRange x = a(0);
        return {std::tanh(x.lo), std::tanh(x.hi), x.nan};
      }
      case Op::sigmoid: {
        const RealRange x = a(0);
        return {1 / (1 + std::exp(-x.lo)), 1 / (1 + std::exp(-x.hi)), x.nan};
      }
      case Op::pow: {  // pow(x, c): |x|^c, of either sign where x may be negative (NaN on
                       // the GPU, whose __powf is exp2(c log2 x); std::pow on the CPU)
        const RealRange x = a(0);
        const double c = double(float(n.args[1]->value));
        if (c == 0) return {1, 1, true};
        const double big = max_abs(x);
        const double small = near_zero(x) ? 0 : std::min(std::fabs(x.lo), std::fabs(x.hi));
        const double m_lo = c > 0 ? std::pow(small, c) : std::pow(big, c);
        const double m_hi = c > 0 ? std::pow(big, c) : (small == 0 ? kInf : std::pow(small, c));
        if (x.lo >= 0) return widen({m_lo, m_hi, x.nan});
        if (std::fmod(c, 2.0) == 0) return widen({m_lo, m_hi, true});  // an even power
        return widen({-m_hi, m_hi, true});
      }
      default:
        return unknown();
    }
  }
};

}  // namespace

RealRange value_range(const Program& p) {
  if (p.is_mask || !p.root) return {0, 0, false};
  return Ranges{p, false}.value();
}

bool may_be_minus_inf(const Program& p) {
  if (p.is_mask || !p.root) return false;
  // What the kernels compute (value_log2), and the functor's plain value in the source's order.
  return Ranges{p, true}.value().lo == -kInf ||
         mul(Ranges{p, false}.value(), point(detail::kLog2e)).lo == -kInf;
}

}  // namespace driftless::layers::expr
