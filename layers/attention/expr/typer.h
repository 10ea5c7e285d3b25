// The static checks of the modifier parser (parse.cpp): typing of every node (integer, real,
// boolean, with the conversions made explicit) and interval arithmetic that proves each table
// subscript in range. Internal to the expression compiler; errors are ParseErrors with columns.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
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

struct Interval {
  double lo = -INFINITY, hi = INFINITY;
};

struct Typer {
  const std::vector<ParamDecl>& params;
  int heads;
  bool is_mask;
  // The largest q or k: unbounded for the checks; the CUDA emitter's bound (the kernels'
  // positions are 32-bit) decides which integer arithmetic fits in 32 bits.
  double position_max = INFINITY;

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
          if (!(r.lo >= 0 && r.hi <= double(dim - 1))) {
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
    return n;
  }

  // Bounds of an integer expression (q, k >= 0; 0 <= h < heads). Unknown: unbounded.
  Interval range(const Node& n) const {
    auto r = [&](size_t i) { return range(*n.args[i]); };
    auto mul = [](double x, double y) { return (x == 0 || y == 0) ? 0.0 : x * y; };
    switch (n.op) {
      case Op::literal:
        return {n.value, n.value};
      case Op::q:
      case Op::k:
        return {0, position_max};
      case Op::h:
        return {0, double(heads - 1)};
      case Op::neg: {
        const Interval a = r(0);
        return {-a.hi, -a.lo};
      }
      case Op::add: {
        const Interval a = r(0), b = r(1);
        return {a.lo + b.lo, a.hi + b.hi};
      }
      case Op::sub: {
        const Interval a = r(0), b = r(1);
        return {a.lo - b.hi, a.hi - b.lo};
      }
      case Op::mul: {
        const Interval a = r(0), b = r(1);
        const double c[4] = {mul(a.lo, b.lo), mul(a.lo, b.hi), mul(a.hi, b.lo), mul(a.hi, b.hi)};
        return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
      }
      case Op::abs: {
        const Interval a = r(0);
        if (a.lo >= 0) return a;
        if (a.hi <= 0) return {-a.hi, -a.lo};
        return {0, std::max(-a.lo, a.hi)};
      }
      case Op::min: {
        const Interval a = r(0), b = r(1);
        return {std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
      }
      case Op::max: {
        const Interval a = r(0), b = r(1);
        return {std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
      }
      case Op::clamp: {
        const Interval x = r(0), lo = r(1), hi = r(2);
        return {std::max(x.lo, lo.lo), std::min(std::max(x.hi, lo.hi), hi.hi)};
      }
      case Op::where: {
        const Interval a = r(1), b = r(2);
        return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
      }
      default:
        return {};
    }
  }
};

}  // namespace driftless::layers::expr::detail
