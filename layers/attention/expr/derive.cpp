// Symbolic derivatives of modifier expressions, their simplification, and the canonical
// printing a kernel cache keys on (expr.h). Only literals made here are folded: a source
// literal is a kernel argument, so folding it would make the structure depend on its value.
#include <charconv>
#include <cmath>
#include <unordered_map>
#include <utility>

#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr {

namespace {

NodePtr lit(double v) {
  auto n = std::make_shared<Node>();
  n->op = Op::literal;
  n->type = Type::real;
  n->value = v;
  return n;
}
NodePtr mk(Op op, std::vector<NodePtr> args, Type type = Type::real) {
  auto n = std::make_shared<Node>();
  n->op = op;
  n->type = type;
  n->args = std::move(args);
  return n;
}
bool is_derived(const NodePtr& n, double v) {
  return n->op == Op::literal && n->slot < 0 && n->value == v;
}
// Structural equality, with a budget of nodes compared (false when it runs out: where()
// then keeps both branches, which is only less simplified).
bool same(const Node& a, const Node& b, int64_t& budget) {
  if (&a == &b) return true;
  if (--budget < 0) return false;
  if (a.op != b.op || a.type != b.type || a.args.size() != b.args.size()) return false;
  if (a.op == Op::literal && (a.value != b.value || a.slot != b.slot)) return false;
  if (a.op == Op::param && a.param != b.param) return false;
  for (size_t i = 0; i < a.args.size(); ++i)
    if (!same(*a.args[i], *b.args[i], budget)) return false;
  return true;
}

// Simplification of a graph whose subexpressions are shared (derive's results): each distinct
// node once. The memo holds its keys, so no key's address is reused while it lives.
struct Simplifier {
  std::unordered_map<const Node*, std::pair<NodePtr, NodePtr>> memo;
  NodePtr operator()(const NodePtr& in);
  NodePtr rewrite(const NodePtr& in);
};

// d n / d x with memos: a node's dependence and derivative are found once, and a derivative
// that a rule reads twice (abs, tanh) is one shared node, so derivation is linear in the
// expression.
struct Deriver {
  int occ;
  std::unordered_map<const Node*, bool> deps;
  std::unordered_map<const Node*, NodePtr> memo;
  bool depends(const Node& n) {
    if (auto it = deps.find(&n); it != deps.end()) return it->second;
    bool d = false;
    if (n.op == Op::score)
      d = occ < 0;
    else if (n.op == Op::param && occ >= 0 && n.occurrence == occ)
      d = true;
    for (const auto& a : n.args) d = depends(*a) || d;
    deps[&n] = d;
    return d;
  }
  NodePtr operator()(const NodePtr& np);
  NodePtr rule(const NodePtr& np);
};

}  // namespace

NodePtr Simplifier::operator()(const NodePtr& in) {
  if (in->args.empty()) return in;
  if (auto it = memo.find(in.get()); it != memo.end()) return it->second.second;
  NodePtr out = rewrite(in);
  memo[in.get()] = {in, out};
  return out;
}

NodePtr simplify(const NodePtr& in) {
  return Simplifier{}(in);
}

NodePtr Simplifier::rewrite(const NodePtr& in) {
  Simplifier& simplify = *this;
  auto n = std::make_shared<Node>(*in);
  for (auto& a : n->args) a = simplify(a);
  const auto& a = n->args;
  auto both_derived = [&] {
    return a.size() == 2 && a[0]->op == Op::literal && a[0]->slot < 0 && a[1]->op == Op::literal &&
           a[1]->slot < 0;
  };
  switch (n->op) {
    case Op::add:
      if (both_derived()) return lit(a[0]->value + a[1]->value);
      if (is_derived(a[0], 0)) return a[1];
      if (is_derived(a[1], 0)) return a[0];
      if (a[1]->op == Op::neg) return simplify(mk(Op::sub, {a[0], a[1]->args[0]}));
      break;
    case Op::sub:
      if (both_derived()) return lit(a[0]->value - a[1]->value);
      if (is_derived(a[1], 0)) return a[0];
      if (is_derived(a[0], 0)) return simplify(mk(Op::neg, {a[1]}));
      if (a[1]->op == Op::neg) return mk(Op::add, {a[0], a[1]->args[0]});
      break;
    case Op::mul:
      if (both_derived()) return lit(a[0]->value * a[1]->value);
      if (is_derived(a[0], 0) || is_derived(a[1], 0)) return lit(0);
      if (is_derived(a[0], 1)) return a[1];
      if (is_derived(a[1], 1)) return a[0];
      if (is_derived(a[0], -1)) return simplify(mk(Op::neg, {a[1]}));
      if (is_derived(a[1], -1)) return simplify(mk(Op::neg, {a[0]}));
      if (a[0]->op == Op::neg) return simplify(mk(Op::neg, {mk(Op::mul, {a[0]->args[0], a[1]})}));
      if (a[1]->op == Op::neg) return simplify(mk(Op::neg, {mk(Op::mul, {a[0], a[1]->args[0]})}));
      break;
    case Op::div:
      if (is_derived(a[0], 0)) return lit(0);
      if (is_derived(a[1], 1)) return a[0];
      if (a[0]->op == Op::neg) return simplify(mk(Op::neg, {mk(Op::div, {a[0]->args[0], a[1]})}));
      break;
    case Op::neg:
      if (a[0]->op == Op::literal && a[0]->slot < 0) return lit(-a[0]->value);
      if (a[0]->op == Op::neg) return a[0]->args[0];
      break;
    case Op::where: {
      int64_t budget = 4096;
      if (same(*a[1], *a[2], budget)) return a[1];
      break;
    }
    default:
      break;
  }
  return n;
}

NodePtr derive(const NodePtr& np, int occ) {
  return Deriver{occ, {}, {}}(np);
}

NodePtr Deriver::operator()(const NodePtr& np) {
  if (auto it = memo.find(np.get()); it != memo.end()) return it->second;
  NodePtr d = depends(*np) ? rule(np) : lit(0);
  memo[np.get()] = d;
  return d;
}

NodePtr Deriver::rule(const NodePtr& np) {
  const Node& n = *np;
  auto d = [&](size_t i) { return (*this)(n.args[i]); };
  const auto& a = n.args;
  switch (n.op) {
    case Op::score:
    case Op::param:
      return lit(1);
    case Op::neg:
      return mk(Op::neg, {d(0)});
    case Op::add:
      return mk(Op::add, {d(0), d(1)});
    case Op::sub:
      return mk(Op::sub, {d(0), d(1)});
    case Op::mul:
      return mk(Op::add, {mk(Op::mul, {d(0), a[1]}), mk(Op::mul, {a[0], d(1)})});
    case Op::div:  // da / b - a db / (b b)
      return mk(Op::sub, {mk(Op::div, {d(0), a[1]}),
                          mk(Op::div, {mk(Op::mul, {a[0], d(1)}), mk(Op::mul, {a[1], a[1]})})});
    case Op::where:
      return mk(Op::where, {a[0], d(1), d(2)});
    case Op::abs:  // the sign times dx: dx is read once, so nested abs() stays linear
      return mk(
          Op::mul,
          {mk(Op::where, {mk(Op::lt, {a[0], lit(0)}, Type::boolean), lit(-1), lit(1)}), d(0)});
    case Op::min:
      return mk(Op::where, {mk(Op::le, {a[0], a[1]}, Type::boolean), d(0), d(1)});
    case Op::max:
      return mk(Op::where, {mk(Op::ge, {a[0], a[1]}, Type::boolean), d(0), d(1)});
    case Op::clamp:  // the value is x < lo ? lo : (x > hi ? hi : x)
      return mk(Op::where, {mk(Op::lt, {a[0], a[1]}, Type::boolean), d(1),
                            mk(Op::where, {mk(Op::gt, {a[0], a[2]}, Type::boolean), d(2), d(0)})});
    case Op::exp:
      return mk(Op::mul, {np, d(0)});
    case Op::log:
      return mk(Op::div, {d(0), a[0]});
    case Op::tanh:
      return mk(Op::mul, {mk(Op::sub, {lit(1), mk(Op::mul, {np, np})}), d(0)});
    case Op::sqrt:
      return mk(Op::div, {d(0), mk(Op::mul, {lit(2), np})});
    case Op::sigmoid:
      return mk(Op::mul, {mk(Op::mul, {np, mk(Op::sub, {lit(1), np})}), d(0)});
    case Op::pow:  // c x^(c - 1) dx
      return mk(Op::mul,
                {mk(Op::mul, {a[1], mk(Op::pow, {a[0], mk(Op::sub, {a[1], lit(1)})})}), d(0)});
    case Op::to_real:
    default:
      // Integer and boolean nodes never depend on score or a learnable parameter (the type
      // checker refuses rounding them), so nothing else is reached.
      return lit(0);
  }
}

namespace {

int precedence(const Node& n) {
  switch (n.op) {
    case Op::lor:
      return 2;
    case Op::land:
      return 3;
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge:
    case Op::eq:
    case Op::ne:
      return 4;
    case Op::add:
    case Op::sub:
      return 5;
    case Op::mul:
    case Op::div:
      return 6;
    case Op::neg:
    case Op::lnot:
      return 7;
    case Op::to_real:
      return precedence(*n.args[0]);
    case Op::literal:
      return n.value < 0 ? 7 : 8;
    default:
      return 8;
  }
}

const char* name_of(Op op) {
  switch (op) {
    case Op::add:
      return " + ";
    case Op::sub:
      return " - ";
    case Op::mul:
      return " * ";
    case Op::div:
      return " / ";
    case Op::lt:
      return " < ";
    case Op::le:
      return " <= ";
    case Op::gt:
      return " > ";
    case Op::ge:
      return " >= ";
    case Op::eq:
      return " == ";
    case Op::ne:
      return " != ";
    case Op::land:
      return " && ";
    case Op::lor:
      return " || ";
    case Op::where:
      return "where";
    case Op::abs:
      return "abs";
    case Op::min:
      return "min";
    case Op::max:
      return "max";
    case Op::clamp:
      return "clamp";
    case Op::exp:
      return "exp";
    case Op::log:
      return "log";
    case Op::tanh:
      return "tanh";
    case Op::sqrt:
      return "sqrt";
    case Op::pow:
      return "pow";
    case Op::sigmoid:
      return "sigmoid";
    case Op::floor:
      return "floor";
    case Op::ceil:
      return "ceil";
    case Op::round:
      return "round";
    case Op::to_int:
      return "int";
    default:
      return "?";
  }
}

std::string number(double v, bool integer) {
  if (integer) return std::to_string(int64_t(v));
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // n: inf, nan
  return s;
}

void print(const Node& n, const Program& p, bool slots, std::string& out) {
  auto child = [&](const Node& c, bool parens) {
    if (parens) out += "(";
    print(c, p, slots, out);
    if (parens) out += ")";
  };
  const int prec = precedence(n);
  switch (n.op) {
    case Op::literal:
      if (slots && n.slot >= 0)
        out += (n.type == Type::integer ? "#" : "$") + std::to_string(n.slot);
      else
        out += number(n.value, n.type == Type::integer);
      return;
    case Op::score:
      out += "score";
      return;
    case Op::q:
      out += "q";
      return;
    case Op::k:
      out += "k";
      return;
    case Op::h:
      out += "h";
      return;
    case Op::param:
      out += p.params[size_t(n.param)].name;
      if (!n.args.empty()) {
        out += "[";
        for (size_t i = 0; i < n.args.size(); ++i) {
          if (i) out += ", ";
          child(*n.args[i], false);
        }
        out += "]";
      }
      return;
    case Op::to_real:  // implicit: reparsing inserts it again
      print(*n.args[0], p, slots, out);
      return;
    case Op::neg:
    case Op::lnot:
      out += n.op == Op::neg ? "-" : "!";
      child(*n.args[0], precedence(*n.args[0]) < 7);
      return;
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge:
    case Op::eq:
    case Op::ne:
    case Op::land:
    case Op::lor:
      // Left-associative: the tree (a + b) + c prints a + b + c, a + (b + c) keeps its
      // parentheses (its rounding differs).
      child(*n.args[0],
            precedence(*n.args[0]) < prec || (prec == 4 && precedence(*n.args[0]) == 4));
      out += name_of(n.op);
      child(*n.args[1], precedence(*n.args[1]) <= prec);
      return;
    default:
      out += name_of(n.op);
      out += "(";
      for (size_t i = 0; i < n.args.size(); ++i) {
        if (i) out += ", ";
        child(*n.args[i], false);
      }
      out += ")";
      return;
  }
}

void collect(const Node& n, std::vector<Literal>& out) {
  if (n.op == Op::literal && n.slot >= 0) {
    if (out.size() <= size_t(n.slot)) out.resize(size_t(n.slot) + 1);
    out[size_t(n.slot)] = {n.value, n.type == Type::integer};
  }
  for (const auto& a : n.args) collect(*a, out);
}

}  // namespace

std::string to_string(const Node& n, const Program& p, bool with_slots) {
  std::string s;
  print(n, p, with_slots, s);
  return s;
}

std::string Program::canonical() const {
  return to_string(*root, *this, false);
}
std::string Program::canonical_structure() const {
  // The parameters' shapes and kinds are structure too: they decide the emitted indexing.
  std::string s = (is_mask ? "mask: " : "score: ") + to_string(*root, *this, true);
  for (const ParamDecl& d : params) {
    s += "; " + d.name + "(";
    for (size_t i = 0; i < d.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(d.shape[i]);
    s += d.learnable ? ") learnable" : ")";
  }
  return s;
}
std::vector<Literal> Program::constants() const {
  std::vector<Literal> out;
  collect(*root, out);
  return out;
}

}  // namespace driftless::layers::expr
