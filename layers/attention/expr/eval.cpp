// Evaluation of modifier expressions on the CPU (expr.h): the oracle the CUDA kernels will
// be held to. Reals in T, indices in exact 64-bit integers, booleans short-circuit.
#include <algorithm>
#include <cmath>

#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr {

namespace {
// Real -> integer saturates to the 32-bit integers and takes NaN to 0, as the emitted
// dl_index does (an index of log(0) must not be undefined behaviour; the subscript's clamp
// then bounds it, and the typer's ranges of integer arithmetic rest on the 32-bit bound).
inline int64_t to_index(double x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483647.0) return 2147483647;
  if (x <= -2147483648.0) return -2147483648LL;
  return int64_t(x);
}
}  // namespace

template <class T>
int64_t eval_int(const Node& n, const Bindings<T>& b, T s, int64_t h, int64_t q, int64_t k) {
  auto i = [&](size_t a) { return eval_int(*n.args[a], b, s, h, q, k); };
  auto r = [&](size_t a) { return eval_real(*n.args[a], b, s, h, q, k); };
  switch (n.op) {
    case Op::literal:
      return int64_t(n.value);
    case Op::q:
      return q;
    case Op::k:
      return k;
    case Op::h:
      return h;
    case Op::neg:
      return -i(0);
    case Op::add:
      return i(0) + i(1);
    case Op::sub:
      return i(0) - i(1);
    case Op::mul:
      return i(0) * i(1);
    case Op::abs:
      return std::abs(i(0));
    case Op::min:
      return std::min(i(0), i(1));
    case Op::max:
      return std::max(i(0), i(1));
    case Op::clamp: {
      const int64_t x = i(0), lo = i(1), hi = i(2);
      return x < lo ? lo : (x > hi ? hi : x);
    }
    case Op::where:
      return eval_bool(*n.args[0], b, s, h, q, k) ? i(1) : i(2);
    case Op::floor:
      return to_index(std::floor(r(0)));
    case Op::ceil:
      return to_index(std::ceil(r(0)));
    case Op::round:
      return to_index(std::round(r(0)));
    case Op::to_int:
      return to_index(r(0));
    default:
      return 0;
  }
}

template <class T>
int64_t param_index(const Node& n, const Bindings<T>& b, T s, int64_t h, int64_t q, int64_t k) {
  int64_t idx = 0;
  for (size_t d = 0; d < n.args.size(); ++d)
    idx = idx * n.shape[d] + eval_int(*n.args[d], b, s, h, q, k);
  return idx;
}

template <class T>
T eval_real(const Node& n, const Bindings<T>& b, T s, int64_t h, int64_t q, int64_t k) {
  if (n.type == Type::integer) return T(eval_int(n, b, s, h, q, k));
  auto r = [&](size_t a) { return eval_real(*n.args[a], b, s, h, q, k); };
  switch (n.op) {
    case Op::literal:
      return T(n.value);
    case Op::score:
      return s;
    case Op::param:
      return b.params[n.param][param_index(n, b, s, h, q, k)];
    case Op::to_real:
      return T(eval_int(*n.args[0], b, s, h, q, k));
    case Op::neg:
      return -r(0);
    case Op::add:
      return r(0) + r(1);
    case Op::sub:
      return r(0) - r(1);
    case Op::mul:
      return r(0) * r(1);
    case Op::div:
      return r(0) / r(1);
    case Op::where:
      return eval_bool(*n.args[0], b, s, h, q, k) ? r(1) : r(2);
    case Op::abs:
      return std::abs(r(0));
    case Op::min:
      return std::min(r(0), r(1));
    case Op::max:
      return std::max(r(0), r(1));
    case Op::clamp: {
      const T x = r(0), lo = r(1), hi = r(2);
      return x < lo ? lo : (x > hi ? hi : x);
    }
    case Op::exp:
      return std::exp(r(0));
    case Op::log:
      return std::log(r(0));
    case Op::tanh:
      return std::tanh(r(0));
    case Op::sqrt:
      return std::sqrt(r(0));
    case Op::pow:
      return std::pow(r(0), r(1));
    case Op::sigmoid:
      return T(1) / (T(1) + std::exp(-r(0)));
    default:
      return T(0);
  }
}

template <class T>
bool eval_bool(const Node& n, const Bindings<T>& b, T s, int64_t h, int64_t q, int64_t k) {
  auto bo = [&](size_t a) { return eval_bool(*n.args[a], b, s, h, q, k); };
  const bool ints = n.args.size() == 2 && n.args[0]->type == Type::integer;
  auto cmp = [&](auto op) {
    if (ints) return op(eval_int(*n.args[0], b, s, h, q, k), eval_int(*n.args[1], b, s, h, q, k));
    return op(eval_real(*n.args[0], b, s, h, q, k), eval_real(*n.args[1], b, s, h, q, k));
  };
  switch (n.op) {
    case Op::lt:
      return cmp([](auto x, auto y) { return x < y; });
    case Op::le:
      return cmp([](auto x, auto y) { return x <= y; });
    case Op::gt:
      return cmp([](auto x, auto y) { return x > y; });
    case Op::ge:
      return cmp([](auto x, auto y) { return x >= y; });
    case Op::eq:
      return cmp([](auto x, auto y) { return x == y; });
    case Op::ne:
      return cmp([](auto x, auto y) { return x != y; });
    case Op::land:
      return bo(0) && bo(1);
    case Op::lor:
      return bo(0) || bo(1);
    case Op::lnot:
      return !bo(0);
    case Op::where:
      return bo(0) ? bo(1) : bo(2);
    default:
      return false;
  }
}

#define DL_EXPR_INSTANTIATE(T)                                                                 \
  template T eval_real<T>(const Node&, const Bindings<T>&, T, int64_t, int64_t, int64_t);      \
  template bool eval_bool<T>(const Node&, const Bindings<T>&, T, int64_t, int64_t, int64_t);   \
  template int64_t eval_int<T>(const Node&, const Bindings<T>&, T, int64_t, int64_t, int64_t); \
  template int64_t param_index<T>(const Node&, const Bindings<T>&, T, int64_t, int64_t, int64_t);
DL_EXPR_INSTANTIATE(float)
DL_EXPR_INSTANTIATE(double)

}  // namespace driftless::layers::expr
