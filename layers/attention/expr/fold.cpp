// Constant folding of the CUDA emitter (fold.h).
#include "layers/attention/expr/fold.h"

namespace driftless::layers::expr::detail {

// A real constant: literals and arithmetic of literals (no score, index or table).
bool is_const(const Node& n) {
  if (n.type != Type::real && n.op != Op::to_real) return false;
  switch (n.op) {
    case Op::literal:
      return true;
    case Op::to_real:
      return n.args[0]->op == Op::literal;
    case Op::neg:
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
      for (const auto& a : n.args)
        if (!is_const(*a)) return false;
      return true;
    default:
      return false;
  }
}

void collect_factors(const Node& n, std::vector<Factor>& out) {
  if (is_const(n)) {
    out.push_back({Factor::mul_const, &n});
  } else if (n.op == Op::score) {
    out.push_back({Factor::score, &n});
  } else if (n.op == Op::mul && n.type == Type::real) {
    collect_factors(*n.args[0], out);
    collect_factors(*n.args[1], out);
  } else if (n.op == Op::div && n.type == Type::real && is_const(*n.args[1])) {
    collect_factors(*n.args[0], out);
    out.push_back({Factor::div_const, n.args[1].get()});
  } else {
    out.push_back({Factor::other, &n});
  }
}

// A constant in float as the kernels read it (c[slot] = float(value); an integer literal
// made real from its int), with each operation rounded as the emitted __f*_rn would.
float const_value(const Node& n) {
  auto r = [&](size_t i) { return const_value(*n.args[i]); };
  switch (n.op) {
    case Op::literal:
      return n.type == Type::integer ? float(int64_t(n.value)) : float(n.value);
    case Op::to_real:
      return float(int64_t(n.args[0]->value));
    case Op::neg:
      return -r(0);
    case Op::add: {
      volatile float x = r(0) + r(1);  // volatile: no contraction with a neighbour's product
      return x;
    }
    case Op::sub: {
      volatile float x = r(0) - r(1);
      return x;
    }
    case Op::mul: {
      volatile float x = r(0) * r(1);
      return x;
    }
    case Op::div: {
      volatile float x = r(0) / r(1);
      return x;
    }
    default:
      return 0.f;  // not a constant (is_const excludes it)
  }
}

float run_recipe(const FoldRecipe& r, float scale) {
  bool any = false;
  volatile float acc = 1.f;
  for (const FoldStep& s : r) {
    switch (s.kind) {
      case FoldStep::start:
        acc = s.value;
        break;
      case FoldStep::scale:
        acc = any ? acc * scale : scale;
        break;
      case FoldStep::mul:
        acc = any ? acc * const_value(*s.n) : const_value(*s.n);
        break;
      case FoldStep::div:
        acc = acc / const_value(*s.n);
        break;
    }
    any = true;
  }
  return acc;
}

}  // namespace driftless::layers::expr::detail
