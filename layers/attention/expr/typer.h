// The static checks of the modifier parser (parse.cpp): typing of every node (integer, real,
// boolean, with the conversions made explicit) and interval arithmetic that proves each table
// subscript in range. Internal to the expression compiler; errors are ParseErrors with columns.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr::detail {

struct ParseError {
  std::string message;
  int column;
};

[[noreturn]] inline void fail(const std::string& m, int column) {
  throw ParseError{m, column};
}

inline const char* type_name(Type t) {
  return t == Type::integer ? "an integer" : (t == Type::real ? "a real" : "a boolean");
}

// Bounds of an integer expression, exact in 64 bits.
struct Interval {
  int64_t lo = 0, hi = 0;
};

struct Typer {
  const std::vector<ParamDecl>& params;
  int heads;
  bool is_mask;
  // Each integer node's range, once. Every node typed here is kept alive with the typer, so
  // no address in `ranges` is reused by another node meanwhile.
  mutable std::unordered_map<const Node*, Interval> ranges = {};
  std::vector<NodePtr> keep = {};

  // Integer arithmetic of literals only (-2, 2 * 3): exact in reals too.
  static bool literal_only(const Node& n) {
    if (n.op == Op::literal) return true;
    if (n.op != Op::neg && n.op != Op::add && n.op != Op::sub && n.op != Op::mul) return false;
    for (const auto& a : n.args)
      if (!literal_only(*a)) return false;
    return true;
  }
  NodePtr as_real(const NodePtr& n) {
    if (n->type == Type::real) return n;
    if (n->type == Type::boolean)
      fail("a boolean is used as a number; use where(cond, a, b)", n->column);
    if (literal_only(*n)) {  // 30 in a real context is the real 30: one canonical form
      auto r = std::make_shared<Node>(*n);
      r->type = Type::real;
      for (auto& a : r->args) a = as_real(a);
      return r;
    }
    auto r = std::make_shared<Node>();
    r->op = Op::to_real;
    r->type = Type::real;
    r->column = n->column;
    r->args = {n};
    return r;
  }
  void want(const NodePtr& n, Type t, const std::string& where) {
    if (n->type != t)
      fail(where + " must be " + type_name(t) + ", got " + type_name(n->type), n->column);
  }
  bool depends(const Node& n) const {  // on score or a learnable parameter
    if (n.op == Op::score) return true;
    if (n.op == Op::param && params[size_t(n.param)].learnable) return true;
    for (const auto& a : n.args)
      if (depends(*a)) return true;
    return false;
  }

  NodePtr type(const NodePtr& in) {
    auto n = std::make_shared<Node>(*in);
    for (auto& a : n->args) a = type(a);
    auto& a = n->args;
    auto numeric = [&](const NodePtr& x, const char* what) {
      if (x->type == Type::boolean)
        fail(std::string(what) + " takes numbers, got a boolean", x->column);
    };
    auto join = [&](size_t from) {  // integer if all integer, else all real
      bool all_int = true;
      for (size_t i = from; i < a.size(); ++i) {
        numeric(a[i], "this operator");
        all_int = all_int && a[i]->type == Type::integer;
      }
      if (!all_int)
        for (size_t i = from; i < a.size(); ++i) a[i] = as_real(a[i]);
      n->type = all_int ? Type::integer : Type::real;
    };
    switch (n->op) {
      case Op::literal:
        break;
      case Op::score:
        if (is_mask)
          fail("mask_mod cannot read score (a mask decides visibility first)", n->column);
        n->type = Type::real;
        break;
      case Op::q:
      case Op::k:
      case Op::h:
        n->type = Type::integer;
        break;
      case Op::param:
        for (size_t i = 0; i < a.size(); ++i) {
          if (a[i]->type != Type::integer)
            fail("subscript " + std::to_string(i) + " of '" + params[size_t(n->param)].name +
                     "' must be an integer index expression, got " + type_name(a[i]->type) +
                     " (use floor(), int() or round())",
                 a[i]->column);
          const Interval r = range(*a[i]);
          const int64_t dim = params[size_t(n->param)].shape[i];
          if (!(r.lo >= 0 && r.hi <= dim - 1)) {
            std::ostringstream m;
            m << "subscript " << i << " of '" << params[size_t(n->param)].name
              << "' may be outside [0, " << dim - 1 << "] (it can be in [" << r.lo << ", " << r.hi
              << "]); bound it with clamp()";
            fail(m.str(), a[i]->column);
          }
        }
        n->type = Type::real;
        break;
      case Op::neg:
      case Op::add:
      case Op::sub:
      case Op::mul:
      case Op::min:
      case Op::max:
      case Op::abs:
      case Op::clamp:
        join(0);
        break;
      case Op::div:
        numeric(a[0], "/");
        numeric(a[1], "/");
        a[0] = as_real(a[0]);
        a[1] = as_real(a[1]);
        n->type = Type::real;
        break;
      case Op::lt:
      case Op::le:
      case Op::gt:
      case Op::ge:
      case Op::eq:
      case Op::ne:
        join(0);
        n->type = Type::boolean;
        break;
      case Op::land:
      case Op::lor:
      case Op::lnot:
        for (auto& x : a) want(x, Type::boolean, "an operand of &&, || and !");
        n->type = Type::boolean;
        break;
      case Op::where:
        want(a[0], Type::boolean, "the condition of where() / ?:");
        join(1);
        break;
      case Op::exp:
      case Op::log:
      case Op::tanh:
      case Op::sqrt:
      case Op::sigmoid:
        numeric(a[0], "this function");
        a[0] = as_real(a[0]);
        n->type = Type::real;
        break;
      case Op::pow:
        numeric(a[0], "pow()");
        a[0] = as_real(a[0]);
        if (a[1]->op != Op::literal && !(a[1]->op == Op::neg && a[1]->args[0]->op == Op::literal))
          fail("the exponent of pow() must be a number", a[1]->column);
        if (a[1]->op == Op::neg) {  // fold -c into a literal
          auto l = std::make_shared<Node>(*a[1]->args[0]);
          l->value = -l->value;
          l->column = a[1]->column;
          a[1] = l;
        }
        a[1] = as_real(a[1]);
        n->type = Type::real;
        break;
      case Op::floor:
      case Op::ceil:
      case Op::round:
      case Op::to_int:
        numeric(a[0], "this function");
        if (depends(*a[0]))
          fail(
              "this rounds an expression of score or of a learnable parameter, which has no "
              "derivative; use it only on index expressions",
              n->column);
        a[0] = as_real(a[0]);
        n->type = Type::integer;
        break;
      case Op::to_real:
        n->type = Type::real;
        break;
    }
    // Every integer node: proven free of 64-bit overflow (range() refuses what may overflow),
    // its clamps' bounds ordered.
    keep.push_back(n);
    if (n->type == Type::integer) range(*n);
    if (n->op == Op::clamp && n->type == Type::real && is_literal_value(*a[1]) &&
        is_literal_value(*a[2]) && literal_value(*a[1]) > literal_value(*a[2]))
      fail("clamp's lower bound exceeds its upper bound", n->column);
    return n;
  }

  // A literal, or a negated one (the bounds of clamp(x, -1.5, 2.5)).
  static bool is_literal_value(const Node& n) {
    const Node& x = n.op == Op::to_real ? *n.args[0] : n;
    return x.op == Op::literal || (x.op == Op::neg && x.args[0]->op == Op::literal);
  }
  static double literal_value(const Node& n) {
    const Node& x = n.op == Op::to_real ? *n.args[0] : n;
    return x.op == Op::literal ? x.value : -x.args[0]->value;
  }

  // Bounds of an integer expression (0 <= q, k <= kMaxPosition; 0 <= h < heads; int() and
  // the rounding functions saturate to 32 bits), in exact 64-bit arithmetic; a node whose
  // value may leave the 64-bit integers, or a clamp whose lower bound may exceed its upper
  // one, is refused at its column. The evaluation (eval.cpp, int64) and the CUDA code (32 or
  // 64 bits by this range, emit_cuda.cpp) then compute every integer node exactly.
  Interval range(const Node& n) const {
    if (auto it = ranges.find(&n); it != ranges.end()) return it->second;
    const Interval r = compute_range(n);
    ranges[&n] = r;
    return r;
  }

  [[noreturn]] static void overflow(const Node& n) {
    fail("this integer arithmetic may overflow 64 bits (q and k reach " +
             std::to_string(kMaxPosition) +
             "); bound its operands with clamp() or compute it in reals (1.0 * q)",
         n.column);
  }
  Interval compute_range(const Node& n) const {
    auto r = [&](size_t i) { return range(*n.args[i]); };
    auto add = [&](int64_t x, int64_t y) {
      int64_t z;
      if (__builtin_add_overflow(x, y, &z)) overflow(n);
      return z;
    };
    auto sub = [&](int64_t x, int64_t y) {
      int64_t z;
      if (__builtin_sub_overflow(x, y, &z)) overflow(n);
      return z;
    };
    auto mul = [&](int64_t x, int64_t y) {
      int64_t z;
      if (__builtin_mul_overflow(x, y, &z)) overflow(n);
      return z;
    };
    switch (n.op) {
      case Op::literal:
        return {int64_t(n.value), int64_t(n.value)};
      case Op::q:
      case Op::k:
        return {0, kMaxPosition};
      case Op::h:
        return {0, int64_t(heads) - 1};
      case Op::neg: {
        const Interval a = r(0);
        return {sub(0, a.hi), sub(0, a.lo)};
      }
      case Op::add: {
        const Interval a = r(0), b = r(1);
        return {add(a.lo, b.lo), add(a.hi, b.hi)};
      }
      case Op::sub: {
        const Interval a = r(0), b = r(1);
        return {sub(a.lo, b.hi), sub(a.hi, b.lo)};
      }
      case Op::mul: {
        const Interval a = r(0), b = r(1);
        const int64_t c[4] = {mul(a.lo, b.lo), mul(a.lo, b.hi), mul(a.hi, b.lo), mul(a.hi, b.hi)};
        return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
      }
      case Op::abs: {
        const Interval a = r(0);
        if (a.lo >= 0) return a;
        if (a.hi <= 0) return {sub(0, a.hi), sub(0, a.lo)};
        return {0, std::max(sub(0, a.lo), a.hi)};
      }
      case Op::min: {
        const Interval a = r(0), b = r(1);
        return {std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
      }
      case Op::max: {
        const Interval a = r(0), b = r(1);
        return {std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
      }
      case Op::clamp: {  // x < lo ? lo : (x > hi ? hi : x), as the CPU and the kernels compute
        const Interval x = r(0), lo = r(1), hi = r(2);
        if (lo.hi > hi.lo) {
          std::ostringstream m;
          m << "clamp's lower bound (in [" << lo.lo << ", " << lo.hi
            << "]) may exceed its upper bound (in [" << hi.lo << ", " << hi.hi << "])";
          fail(m.str(), n.column);
        }
        // Ordered bounds: min(max(x, lo), hi), increasing in each.
        return {std::min(std::max(x.lo, lo.lo), hi.lo), std::min(std::max(x.hi, lo.hi), hi.hi)};
      }
      case Op::where: {
        const Interval a = r(1), b = r(2);
        return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
      }
      case Op::floor:
      case Op::ceil:
      case Op::round:
      case Op::to_int:
        return {int64_t(std::numeric_limits<int32_t>::min()),
                int64_t(std::numeric_limits<int32_t>::max())};
      default:
        return {};
    }
  }
};

}  // namespace driftless::layers::expr::detail
