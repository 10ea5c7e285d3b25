// Parser and static checks of modifier expressions (expr.h): every error names the column
// and shows the source with a caret, before any attention work; subscripts are proven in
// range by interval arithmetic, so evaluation never reads outside a table.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "engine/core/error.h"
#include "layers/attention/expr/expr.h"
#include "layers/attention/expr/typer.h"

namespace driftless::layers::expr {

namespace {

using detail::fail;
using detail::ParseError;
using detail::Typer;

const char* kKnown =
    "score, q, k, h, the parameters of model.score_mod_params, where, abs, min, max, clamp, "
    "exp, log, tanh, sqrt, pow, sigmoid, floor, ceil, round, int";

struct Func {
  const char* name;
  Op op;
  int arity;
};
const Func kFuncs[] = {
    {"where", Op::where, 3}, {"abs", Op::abs, 1},         {"min", Op::min, 2},
    {"max", Op::max, 2},     {"clamp", Op::clamp, 3},     {"exp", Op::exp, 1},
    {"log", Op::log, 1},     {"tanh", Op::tanh, 1},       {"sqrt", Op::sqrt, 1},
    {"pow", Op::pow, 2},     {"sigmoid", Op::sigmoid, 1}, {"floor", Op::floor, 1},
    {"ceil", Op::ceil, 1},   {"round", Op::round, 1},     {"int", Op::to_int, 1}};

class Parser {
 public:
  Parser(const std::string& s, const std::vector<ParamDecl>& params) : s_(s), params_(params) {}

  NodePtr parse_all() {
    NodePtr n = ternary();
    skip();
    if (i_ < s_.size()) fail("unexpected '" + std::string(1, s_[i_]) + "'", col());
    return n;
  }

 private:
  int col() const { return int(i_) + 1; }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(const char* tok) {
    skip();
    const size_t n = std::char_traits<char>::length(tok);
    if (s_.compare(i_, n, tok) != 0) return false;
    // '<' must not eat the first char of '<=', '!' not of '!=', '=' alone is not an operator
    if (n == 1 && i_ + 1 < s_.size() && s_[i_ + 1] == '=' && std::strchr("<>!", tok[0]))
      return false;
    i_ += n;
    return true;
  }
  void expect(const char* tok, const std::string& what) {
    if (!eat(tok)) {
      skip();
      fail("expected '" + std::string(tok) + "' " + what +
               (i_ < s_.size() ? ", got '" + std::string(1, s_[i_]) + "'" : ", got the end"),
           col());
    }
  }
  // One level of the parser's recursion (a parenthesis, an argument, a unary operator):
  // bounded, so that no input exhausts the stack.
  struct Nest {
    int& depth;
    Nest(int& d, int column) : depth(d) {
      if (++depth > kMaxDepth)
        fail("the expression nests deeper than " + std::to_string(kMaxDepth) + " levels", column);
    }
    ~Nest() { --depth; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
  };
  // The depth of a node's tree: every later pass recurses over it, so it is bounded too (a
  // chain a + b + c + ... is parsed by a loop, but its tree is as deep as it is long).
  int depth_of(const NodePtr& n) const {
    const auto it = depths_.find(n.get());
    return it == depths_.end() ? 1 : it->second;
  }
  NodePtr make(Op op, int column, std::vector<NodePtr> args) {
    auto n = std::make_shared<Node>();
    n->op = op;
    n->column = column;
    n->args = std::move(args);
    note_depth(n);
    return n;
  }
  void note_depth(const NodePtr& n) {
    int d = 1;
    for (const auto& a : n->args) d = std::max(d, depth_of(a) + 1);
    if (d > kMaxDepth)
      fail("the expression nests deeper than " + std::to_string(kMaxDepth) +
               " levels (a chain of operators counts a level per operator)",
           n->column);
    depths_[n.get()] = d;
  }

  NodePtr ternary() {
    skip();
    const Nest nest(nesting_, col());
    NodePtr c = logic_or();
    skip();
    const int at = col();
    if (!eat("?")) return c;
    NodePtr a = ternary();
    expect(":", "in a ? b : c");
    NodePtr b = ternary();
    return make(Op::where, at, {c, a, b});
  }
  NodePtr logic_or() {
    NodePtr l = logic_and();
    for (;;) {
      skip();
      const int at = col();
      if (!eat("||")) return l;
      l = make(Op::lor, at, {l, logic_and()});
    }
  }
  NodePtr logic_and() {
    NodePtr l = compare();
    for (;;) {
      skip();
      const int at = col();
      if (!eat("&&")) return l;
      l = make(Op::land, at, {l, compare()});
    }
  }
  NodePtr compare() {
    NodePtr l = additive();
    skip();
    const int at = col();
    static const std::pair<const char*, Op> ops[] = {{"<=", Op::le}, {">=", Op::ge}, {"==", Op::eq},
                                                     {"!=", Op::ne}, {"<", Op::lt},  {">", Op::gt}};
    for (const auto& [tok, op] : ops)
      if (eat(tok)) {
        NodePtr r = make(op, at, {l, additive()});
        skip();
        for (const auto& [t2, o2] : ops)
          if (s_.compare(i_, std::char_traits<char>::length(t2), t2) == 0)
            fail("comparisons do not chain; write (a < b) && (b < c)", col());
        return r;
      }
    return l;
  }
  NodePtr additive() {
    NodePtr l = multiplicative();
    for (;;) {
      skip();
      const int at = col();
      if (eat("+"))
        l = make(Op::add, at, {l, multiplicative()});
      else if (eat("-"))
        l = make(Op::sub, at, {l, multiplicative()});
      else
        return l;
    }
  }
  NodePtr multiplicative() {
    NodePtr l = unary();
    for (;;) {
      skip();
      const int at = col();
      if (eat("*"))
        l = make(Op::mul, at, {l, unary()});
      else if (eat("/"))
        l = make(Op::div, at, {l, unary()});
      else
        return l;
    }
  }
  NodePtr unary() {
    skip();
    const int at = col();
    const Nest nest(nesting_, at);
    if (eat("-")) return make(Op::neg, at, {unary()});
    if (eat("+")) return unary();
    if (eat("!")) return make(Op::lnot, at, {unary()});
    return primary();
  }
  std::vector<NodePtr> list(const char* close) {
    std::vector<NodePtr> args;
    if (eat(close)) return args;
    for (;;) {
      args.push_back(ternary());
      if (eat(close)) return args;
      expect(",", std::string("or '") + close + "' in an argument list");
    }
  }
  NodePtr primary() {
    skip();
    const int at = col();
    if (i_ >= s_.size()) fail("expected a value, got the end", at);
    const char c = s_[i_];
    if (eat("(")) {
      NodePtr n = ternary();
      expect(")", "to close the '(' at column " + std::to_string(at));
      return n;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i_;
      while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_'))
        ++j;
      const std::string id = s_.substr(i_, j - i_);
      i_ = j;
      skip();
      const bool call = i_ < s_.size() && s_[i_] == '(';
      const bool index = i_ < s_.size() && s_[i_] == '[';
      for (size_t p = 0; p < params_.size(); ++p)
        if (params_[p].name == id) {
          auto n = std::make_shared<Node>();
          n->op = Op::param;
          n->param = int(p);
          n->shape = params_[p].shape;
          n->column = at;
          if (index) {
            ++i_;
            n->args = list("]");
          }
          note_depth(n);
          const size_t want = params_[p].shape.size();
          if (n->args.size() != want)
            fail("parameter '" + id + "' has " + std::to_string(want) +
                     " dimension(s) but is indexed with " + std::to_string(n->args.size()) +
                     " subscript(s)" +
                     (want ? " (write " + id + (want == 1 ? "[h]" : "[h, i]") + ")" : ""),
                 at);
          return n;
        }
      if (call) {
        ++i_;
        for (const Func& f : kFuncs)
          if (id == f.name) {
            std::vector<NodePtr> args = list(")");
            if (int(args.size()) != f.arity)
              fail(id + "() takes " + std::to_string(f.arity) + " argument(s), got " +
                       std::to_string(args.size()),
                   at);
            return make(f.op, at, std::move(args));
          }
        fail("unknown function '" + id + "'; known: " + kKnown, at);
      }
      if (index) fail("'" + id + "' is not a parameter and cannot be indexed", at);
      if (id == "score") return make(Op::score, at, {});
      if (id == "q") return make(Op::q, at, {});
      if (id == "k") return make(Op::k, at, {});
      if (id == "h") return make(Op::h, at, {});
      if (id == "doc" || id == "b")
        fail("'" + id +
                 "' (the document index) is not available: it is the index within one "
                 "attention call, which changes with micro-sequences and ranks",
             at);
      std::string known = std::string(kKnown);
      for (const auto& p : params_) known += ", " + p.name;
      fail("unknown identifier '" + id + "'; known: " + known, at);
    }
    fail("unexpected '" + std::string(1, c) + "'", at);
  }
  NodePtr number() {
    const size_t start = i_;
    bool integer = true;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ < s_.size() && s_[i_] == '.') {
      integer = false;
      ++i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      integer = false;
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
        fail("malformed number", int(start) + 1);
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    const std::string text = s_.substr(start, i_ - start);
    if (text == ".") fail("malformed number", int(start) + 1);
    auto n = std::make_shared<Node>();
    n->op = Op::literal;
    n->type = integer ? Type::integer : Type::real;
    n->column = int(start) + 1;
    // strtod, not stod: a number past the doubles is this column's error, not an exception.
    errno = 0;
    n->value = std::strtod(text.c_str(), nullptr);
    if (errno == ERANGE && std::isinf(n->value))
      fail("the number " + text + " is out of range", n->column);
    if (integer && n->value > double(std::numeric_limits<int32_t>::max()))
      fail("integer literal " + text + " does not fit 32 bits", n->column);
    if (!integer && n->value > double(std::numeric_limits<float>::max()))
      fail("the number " + text + " does not fit a float (the kernels compute in float)",
           n->column);
    return n;
  }

  const std::string& s_;
  const std::vector<ParamDecl>& params_;
  size_t i_ = 0;
  int nesting_ = 0;
  std::unordered_map<const Node*, int> depths_;
};

void collect_occurrences(const NodePtr& n, const std::vector<ParamDecl>& params,
                         std::vector<const Node*>& out) {
  for (const auto& a : n->args) collect_occurrences(a, params, out);
  if (n->op == Op::param && params[size_t(n->param)].learnable) {
    const_cast<Node&>(*n).occurrence = int(out.size());
    out.push_back(n.get());
  }
}

void number_slots(const NodePtr& n, int& next) {
  if (n->op == Op::literal) const_cast<Node&>(*n).slot = next++;
  for (const auto& a : n->args) number_slots(a, next);
}

void check_params(const std::vector<ParamDecl>& params, int heads, const char* op) {
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamDecl& p = params[i];
    const std::string problem = param_name_problem(p.name);
    DL_CHECK(problem.empty(), op, problem);
    for (size_t j = 0; j < i; ++j)
      DL_CHECK(params[j].name != p.name, op, "parameter '" << p.name << "' is declared twice");
    DL_CHECK(p.shape.size() <= 2 && (p.shape.empty() || p.shape[0] == heads), op,
             "parameter '" << p.name << "' must be a scalar, (heads) = (" << heads
                           << ") or (heads, n), got " << p.shape.size() << " dimension(s)"
                           << (p.shape.empty() ? "" : " with first " + std::to_string(p.shape[0])));
    DL_CHECK(p.shape.size() < 2 || p.shape[1] > 0, op,
             "parameter '" << p.name << "' needs n > 0 in (heads, n)");
    DL_CHECK(int64_t(p.init.size()) == p.numel(), op,
             "parameter '" << p.name << "' has " << p.init.size() << " initial values, expected "
                           << p.numel());
  }
}

// Real subexpressions of literals alone have one value for every pair: one that is not
// finite in double or in float (sqrt(-1.0), log(0.0), 1e30 * 1e30), or a division by such a
// zero (score / 0), is refused here rather than meeting the softmax as NaN or infinity.
void check_finite(const Node& n, std::unordered_map<const Node*, bool>& constant) {
  bool c = n.op == Op::literal;
  if (!n.args.empty()) {
    c = true;
    for (const auto& a : n.args) {
      check_finite(*a, constant);
      c = c && constant.at(a.get());
    }
  }
  if (n.op == Op::score || n.op == Op::q || n.op == Op::k || n.op == Op::h || n.op == Op::param)
    c = false;
  constant[&n] = c;
  if (n.type != Type::real) return;
  const Bindings<double> bd;
  const Bindings<float> bf;
  auto describe = [](double v) -> std::string {
    return std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf");
  };
  if (c) {
    const double d = eval_real(n, bd, 0.0, 0, 0, 0);
    const float f = eval_real(n, bf, 0.f, 0, 0, 0);
    if (!std::isfinite(d) || !std::isfinite(f))
      fail("this is " + describe(std::isfinite(d) ? double(f) : d) +
               " for every pair; a score must be finite",
           n.column);
  }
  if (n.op == Op::div && constant.at(n.args[1].get()) &&
      (eval_real(*n.args[1], bd, 0.0, 0, 0, 0) == 0 ||
       eval_real(*n.args[1], bf, 0.f, 0, 0, 0) == 0))
    fail("division by zero", n.column);
}

// The terms of a tree as it is walked (a shared subexpression counts each time it is read),
// saturating at kMaxTerms + 1; linear in the distinct nodes.
int64_t terms(const Node& n, std::unordered_map<const Node*, int64_t>& memo) {
  if (auto it = memo.find(&n); it != memo.end()) return it->second;
  int64_t t = 1;
  for (const auto& a : n.args) t = std::min(kMaxTerms + 1, t + terms(*a, memo));
  memo[&n] = t;
  return t;
}

std::shared_ptr<const Program> compile(const std::string& source,
                                       const std::vector<ParamDecl>& params, int heads, bool mask) {
  const char* op = mask ? "mask_mod" : "score_mod";
  DL_CHECK(heads > 0, op, "heads must be positive, got " << heads);
  DL_CHECK(source.size() <= kMaxSourceLength, op,
           "an expression of at most " << kMaxSourceLength << " characters, got " << source.size());
  check_params(params, heads, op);
  auto p = std::make_shared<Program>();
  p->source = source;
  p->is_mask = mask;
  p->heads = heads;
  p->params = params;
  try {
    NodePtr root = Parser(source, params).parse_all();
    Typer t{params, heads, mask};
    root = t.type(root);
    if (mask) {
      t.want(root, Type::boolean, "a mask_mod");
    } else {
      if (root->type == Type::boolean)
        fail("a score_mod must be a number, got a boolean (a mask belongs in mask_mod)", 1);
      root = t.as_real(root);
    }
    std::unordered_map<const Node*, bool> constant;
    check_finite(*root, constant);
    int slots = 0;
    number_slots(root, slots);
    p->root = root;
  } catch (const ParseError& e) {
    // A long source is shown as the 120 characters around the column.
    const size_t at = size_t(std::max(e.column - 1, 0)), from = at > 60 ? at - 60 : 0;
    const std::string shown = (from > 0 ? "..." : "") + source.substr(from, 120) +
                              (from + 120 < source.size() ? "..." : "");
    std::ostringstream m;
    m << e.message << " at column " << e.column << ":\n  " << shown << "\n  "
      << std::string(at - from + (from > 0 ? 3 : 0), ' ') << "^";
    DL_FAIL(op, m.str());
  }
  if (!mask) {
    collect_occurrences(p->root, p->params, p->occurrences);
    p->d_score = simplify(derive(p->root, -1));
    for (size_t i = 0; i < p->occurrences.size(); ++i)
      p->d_occurrence.push_back(simplify(derive(p->root, int(i))));
    // Derivation shares subexpressions (derive.cpp), but the evaluator and the emitter walk
    // trees: their size is bounded before either does.
    std::unordered_map<const Node*, int64_t> memo;
    int64_t total = terms(*p->root, memo) + terms(*p->d_score, memo);
    for (const NodePtr& d : p->d_occurrence)
      total = std::min(kMaxTerms + 1, total + terms(*d, memo));
    DL_CHECK(total <= kMaxTerms, op,
             "the expression and its derivatives have more than "
                 << kMaxTerms << " terms (" << p->occurrences.size()
                 << " reads of learnable parameters); write a shorter expression:\n  " << source);
  }
  for (const ParamDecl& d : p->params) {
    p->grad_offset.push_back(d.learnable ? p->param_count : -1);
    if (d.learnable) p->param_count += d.numel();
  }
  p->functor_text = emit_cuda(*p, "DlFunctor", true);
  return p;
}

bool mentions(const Node& n, Op op) {
  if (n.op == op) return true;
  for (const auto& a : n.args)
    if (mentions(*a, op)) return true;
  return false;
}

}  // namespace

bool is_function_name(const std::string& name) {
  for (const Func& f : kFuncs)
    if (name == f.name) return true;
  return false;
}

int64_t ParamDecl::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool Program::reads_positions() const {
  return mentions(*root, Op::q) || mentions(*root, Op::k);
}
bool Program::reads_score() const {
  return mentions(*root, Op::score);
}

std::shared_ptr<const Program> compile_score_mod(const std::string& source,
                                                 const std::vector<ParamDecl>& params, int heads) {
  return compile(source, params, heads, false);
}
std::shared_ptr<const Program> compile_mask_mod(const std::string& source,
                                                const std::vector<ParamDecl>& params, int heads) {
  return compile(source, params, heads, true);
}

}  // namespace driftless::layers::expr
