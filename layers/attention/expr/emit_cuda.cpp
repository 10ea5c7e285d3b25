// CUDA source of a modifier expression (expr.h emit_cuda): a self-contained device functor
// with the score_mod.h interface in float, for kernels compiled at run time with NVRTC.
// Same operation order and conversions as the CPU evaluation (eval.cpp) in float, with the
// GPU's fast approximations of exp, log, pow, tanh and division (a few ulp, as the built-in
// softcap's tanh), and table reads that depend on the head alone hoisted into bind_into.
#include <algorithm>
#include <charconv>
#include <sstream>
#include <unordered_map>

#include "engine/core/error.h"
#include "layers/attention/expr/expr.h"
#include "layers/attention/expr/fold.h"
#include "layers/attention/expr/typer.h"

namespace driftless::layers::expr {

namespace {

using namespace detail;  // fold.h, typer.h

const char* kHelpers = R"(#ifndef DL_EXPR_HELPERS
#define DL_EXPR_HELPERS
template <class X> __device__ __forceinline__ X dl_min(X a, X b) { return b < a ? b : a; }
template <class X> __device__ __forceinline__ X dl_max(X a, X b) { return a < b ? b : a; }
template <class X> __device__ __forceinline__ X dl_clamp(X x, X lo, X hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}
__device__ __forceinline__ float dl_abs(float x) { return fabsf(x); }
__device__ __forceinline__ long long dl_abs(long long x) { return x < 0 ? -x : x; }
__device__ __forceinline__ int dl_abs(int x) { return x < 0 ? -x : x; }
// tanh(x) = 1 - 2 / (2^(2 x log2 e) + 1) from ex2.approx and rcp.approx: absolute error ~1e-7,
// exactly +-1 for large |x| (the built-in softcap's tanh_fast).
// dl_tanh_pre takes its argument already multiplied by 2 log2 e (the emitter folds that
// factor into a constant of the argument: tanh(score / 30) is dl_tanh_pre(dot * K)).
__device__ __forceinline__ float dl_tanh_pre(float two_log2e_x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(two_log2e_x));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.f));
  return fmaf(-2.f, r, 1.f);
}
__device__ __forceinline__ float dl_tanh(float x) { return dl_tanh_pre(x * 2.8853900817779268f); }
// int(), floor(), ceil(), round(): saturated to the 32-bit integers, NaN to 0 (eval.cpp).
__device__ __forceinline__ int dl_index(float x) {
  return x != x ? 0 : (x >= 2147483647.f ? 2147483647 : (x <= -2147483648.f ? (-2147483647 - 1) : (int)x));
}
#endif
)";

bool mentions_position_or_score(const Node& n) {
  if (n.op == Op::q || n.op == Op::k || n.op == Op::score) return true;
  for (const auto& a : n.args)
    if (mentions_position_or_score(*a)) return true;
  return false;
}

// The table reads of a score expression whose subscripts depend on the head alone, in the
// order a depth-first walk meets them (one slot each; the same node object in both the
// value and derivative trees shares a slot).
void collect_bound(const Node& n, std::vector<const Node*>& out) {
  if (n.op == Op::param && !mentions_position_or_score(n)) {
    for (const Node* o : out)
      if (o == &n) return;
    out.push_back(&n);
    return;
  }
  for (const auto& a : n.args) collect_bound(*a, out);
}

std::vector<const Node*> bound_reads(const Program& p) {
  std::vector<const Node*> out;
  if (p.is_mask || !p.root) return out;
  collect_bound(*p.root, out);
  if (p.d_score) collect_bound(*p.d_score, out);
  for (const auto& d : p.d_occurrence) collect_bound(*d, out);
  return out;
}

// Integer arithmetic in 32 bits where it provably fits: the kernels' positions are 32-bit
// ints, and an expression's integer node is emitted as int when its range and its integer
// operands' (interval arithmetic, typer.h) fit, else in 64 bits (a 64-bit to float conversion
// costs several instructions: measured, ALiBi's expression ran its forward at 0.64x the
// built-in's). The range depends on integer literals' values, which the program text (and
// with it the kernel cache's key) then depends on too.
struct Widths {
  detail::Typer typer;
  mutable std::unordered_map<const Node*, bool> memo;
  explicit Widths(const Program& p) : typer{p.params, p.heads, p.is_mask} {}
  bool fits(const Node& n) const {
    if (n.type != Type::integer) return true;
    if (auto it = memo.find(&n); it != memo.end()) return it->second;
    const detail::Interval r = typer.range(n);
    bool ok = r.lo >= -2147483648LL && r.hi <= 2147483647LL;
    for (const auto& a : n.args) ok = ok && fits(*a);
    memo[&n] = ok;
    return ok;
  }
};

struct Emitter {
  const Program& p;
  bool members;
  std::vector<const Node*> bound;  // hoisted reads: bd->v[i] where bd is given
  bool use_bound = true;
  Widths widths{p};
  // An integer operand of n: as it is where n computes in 32 bits, widened otherwise.
  std::string operand(const Node& n, const Node& arg) {
    const std::string x = e(arg);
    if (arg.type != Type::integer || widths.fits(n)) return x;
    return "((long long)" + x + ")";
  }
  // Fold mode (value_log2, derivative_dot: functions of the raw dot product): the constant
  // factors of a product chain, with the softmax scale where the chain holds the score,
  // tanh's 2 log2 e and the value's log2 e, are multiplied on the host (folded_constants, in
  // IEEE float and the order the host folds the built-ins' factors in) into the functor's
  // member f[i], a kernel parameter as the built-ins' factors are; the chain multiplies its
  // other factors by it.
  bool fold = false;
  std::vector<std::string> folds;   // each folded constant as text (its identity)
  std::vector<FoldRecipe> recipes;  // and how the host computes it

  // The row-major flat index of a table read (or of a learnable occurrence): 32-bit where
  // the table and the subscripts are (the typer proved every subscript in range).
  std::string index(const Node& n) {
    int64_t numel = 1;
    bool w32 = true;
    for (size_t d = 0; d < n.args.size(); ++d) {
      numel *= n.shape[d];
      w32 = w32 && widths.fits(*n.args[d]);
    }
    w32 = w32 && numel <= 2147483647;
    std::string idx = w32 ? "0" : "0LL";
    for (size_t d = 0; d < n.args.size(); ++d) {
      const std::string sub = w32 ? e(*n.args[d]) : "((long long)" + e(*n.args[d]) + ")";
      idx = "(" + idx + " * " + std::to_string(n.shape[d]) + (w32 ? "" : "LL") + " + " + sub + ")";
    }
    return idx;
  }
  // A constant as bind_into computes it: correctly rounded operations (no contraction).
  std::string ce(const Node& n) {
    switch (n.op) {
      case Op::neg:
        return "(-" + ce(*n.args[0]) + ")";
      case Op::add:
        return "__fadd_rn(" + ce(*n.args[0]) + ", " + ce(*n.args[1]) + ")";
      case Op::sub:
        return "__fsub_rn(" + ce(*n.args[0]) + ", " + ce(*n.args[1]) + ")";
      case Op::mul:
        return "__fmul_rn(" + ce(*n.args[0]) + ", " + ce(*n.args[1]) + ")";
      case Op::div:
        return "__fdiv_rn(" + ce(*n.args[0]) + ", " + ce(*n.args[1]) + ")";
      default:
        return e(n);  // a literal (or an integer literal made real)
    }
  }
  // The slot of a folded constant (one slot per distinct expression: the value and the
  // derivative then read the same slot, and the compiler shares their common terms).
  std::string fold_slot(const std::string& expr, const FoldRecipe& recipe) {
    size_t i = 0;
    while (i < folds.size() && folds[i] != expr) ++i;
    if (i == folds.size()) {
      folds.push_back(expr);
      recipes.push_back(recipe);
    }
    return "f[" + std::to_string(i) + "]";
  }
  // n as a product chain with its constants folded, the accumulation starting from `init`
  // (a float literal, or "" for none); "" when there is nothing to fold.
  std::string chain(const Node& n, const std::string& init) {
    std::vector<Factor> f;
    collect_factors(n, f);
    bool consts = false, has_score = false;
    for (const Factor& x : f) {
      consts = consts || x.kind == Factor::mul_const || x.kind == Factor::div_const;
      has_score = has_score || x.kind == Factor::score;
    }
    if (!consts && !(has_score && !init.empty())) return "";
    std::string acc = init, prod;
    FoldRecipe recipe;
    if (!init.empty()) recipe.push_back({FoldStep::start, init == kLog2eText ? kLog2e : kTwoLog2e});
    auto times = [](const std::string& a, const std::string& b) {
      return a.empty() ? b : "__fmul_rn(" + a + ", " + b + ")";
    };
    for (const Factor& x : f) {
      switch (x.kind) {
        case Factor::score:
          acc = times(acc, "scale");
          recipe.push_back({FoldStep::scale});
          prod += (prod.empty() ? "" : " * ") + std::string("dot");
          break;
        case Factor::mul_const:
          acc = times(acc, ce(*x.n));
          recipe.push_back({FoldStep::mul, 0.f, x.n});
          break;
        case Factor::div_const:
          acc = "__fdiv_rn(" + (acc.empty() ? std::string("1.0f") : acc) + ", " + ce(*x.n) + ")";
          recipe.push_back({FoldStep::div, 0.f, x.n});
          break;
        case Factor::other:
          prod += (prod.empty() ? "" : " * ") + e(*x.n);
          break;
      }
    }
    const std::string k = fold_slot(acc, recipe);
    return prod.empty() ? k : "((" + prod + ") * " + k + ")";
  }
  // The value in log2 units (value * log2 e), folded.
  std::string value_log2(const Node& root) {
    const std::string c = chain(root, kLog2eText);
    return c.empty() ? "(" + e(root) + " * " + kLog2eText + ")" : c;
  }

  std::string real_literal(double v) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    std::string s(buf, r.ptr);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return "((float)" + s + ")";
  }
  std::string args(const Node& n, const char* f) {
    std::string s = std::string(f) + "(";
    for (size_t i = 0; i < n.args.size(); ++i) s += (i ? ", " : "") + operand(n, *n.args[i]);
    return s + ")";
  }
  std::string bin(const Node& n, const char* op) {
    return "(" + operand(n, *n.args[0]) + " " + op + " " + operand(n, *n.args[1]) + ")";
  }
  std::string e(const Node& n) {
    switch (n.op) {
      case Op::literal: {
        const bool w32 = widths.fits(n);
        if (members && n.slot >= 0) {
          if (n.type != Type::integer) return "c[" + std::to_string(n.slot) + "]";
          const std::string v = "ci[" + std::to_string(n.slot) + "]";
          return w32 ? "((int)" + v + ")" : v;
        }
        return n.type == Type::integer
                   ? "(" + std::to_string(int64_t(n.value)) + (w32 ? ")" : "LL)")
                   : real_literal(n.value);
      }
      case Op::score:
        return "score";
      case Op::q:
        return "q";
      case Op::k:
        return "k";
      case Op::h:
        return "hg";
      case Op::param: {
        std::string idx = index(n);
        const std::string read = "p_" + p.params[size_t(n.param)].name + "[" + idx + "]";
        if (use_bound)
          for (size_t i = 0; i < bound.size(); ++i)
            if (bound[i] == &n) return "(bd ? bd->v[" + std::to_string(i) + "] : " + read + ")";
        return read;
      }
      case Op::to_real:
        return "((float)" + e(*n.args[0]) + ")";
      case Op::neg:
        return "(-" + operand(n, *n.args[0]) + ")";
      case Op::lnot:
        return "(!" + e(*n.args[0]) + ")";
      case Op::add:
        return bin(n, "+");
      case Op::sub:
        return bin(n, "-");
      case Op::mul:
        if (fold && n.type == Type::real)
          if (std::string c = chain(n, ""); !c.empty()) return c;
        return bin(n, "*");
      case Op::div:  // integer division keeps C's; real division is the fast approximation
        if (n.type == Type::integer) return bin(n, "/");
        if (fold)
          if (std::string c = chain(n, ""); !c.empty()) return c;
        return "__fdividef(" + e(*n.args[0]) + ", " + e(*n.args[1]) + ")";
      case Op::lt:
        return bin(n, "<");
      case Op::le:
        return bin(n, "<=");
      case Op::gt:
        return bin(n, ">");
      case Op::ge:
        return bin(n, ">=");
      case Op::eq:
        return bin(n, "==");
      case Op::ne:
        return bin(n, "!=");
      case Op::land:
        return bin(n, "&&");
      case Op::lor:
        return bin(n, "||");
      case Op::where:
        return "(" + e(*n.args[0]) + " ? " + operand(n, *n.args[1]) + " : " +
               operand(n, *n.args[2]) + ")";
      case Op::abs:
        return args(n, "dl_abs");
      case Op::min:
        return args(n, "dl_min");
      case Op::max:
        return args(n, "dl_max");
      case Op::clamp:
        return args(n, "dl_clamp");
      case Op::exp:
        return args(n, "__expf");
      case Op::log:
        return args(n, "__logf");
      case Op::tanh:
        if (fold)
          if (std::string c = chain(*n.args[0], kTwoLog2eText); !c.empty())
            return "dl_tanh_pre(" + c + ")";
        return args(n, "dl_tanh");
      case Op::sqrt:
        return args(n, "sqrtf");
      case Op::pow:
        return args(n, "__powf");
      case Op::sigmoid:
        return "__fdividef(1.0f, 1.0f + __expf(-" + e(*n.args[0]) + "))";
      case Op::floor:
        return "dl_index(floorf(" + e(*n.args[0]) + "))";
      case Op::ceil:
        return "dl_index(ceilf(" + e(*n.args[0]) + "))";
      case Op::round:
        return "dl_index(roundf(" + e(*n.args[0]) + "))";
      case Op::to_int:
        return "dl_index(" + e(*n.args[0]) + ")";
    }
    return "0";
  }
};

// The bodies of value_log2 and derivative_dot, and the constants they fold.
struct Folded {
  std::string value, derivative;
  std::vector<std::string> folds;
  std::vector<FoldRecipe> recipes;
};
Folded folded(const Program& p, bool members) {
  Emitter em{p, members, bound_reads(p)};
  em.fold = true;
  Folded f;
  f.value = em.value_log2(*p.root);
  f.derivative = em.e(*p.d_score);
  f.folds = em.folds;
  f.recipes = em.recipes;
  return f;
}

// The return of a score's value: a value that may be -inf (may_be_minus_inf) is returned NaN
// where it is -inf, which the kernels carry into the row (and the loss) instead of weighing the
// pair 0 as a hidden one. Any other returns as it is: a select on every expression slowed the
// forward and took the built-ins' bits from the built-ins written as expressions (measured,
// BENCHMARKS.md "A -inf expression score made NaN in the GPU kernels"). -inf is a constant
// expression (rtc_std.h INFINITY); NVRTC has no __builtin_nanf, and its __int_as_float of a
// constant is a constant operand of the select in the PTX.
std::string returned(const std::string& value, bool guard) {
  if (!guard) return "    return " + value + ";\n";
  return "    const float v = " + value + ";\n" +
         "    return v == -(1e38f * 1e38f) ? __int_as_float(0x7fc00000) : v;  // -inf is NaN\n";
}

// The learnable table ordinal (grad_tables' index) of each declared parameter, -1 if fixed.
std::vector<int> grad_table_of(const Program& p) {
  std::vector<int> out(p.params.size(), -1);
  int n = 0;
  for (size_t i = 0; i < p.params.size(); ++i)
    if (p.grad_offset[i] >= 0) out[i] = n++;
  return out;
}

}  // namespace

namespace {
bool calls_transcendental(const Node& n) {
  switch (n.op) {
    case Op::tanh:
    case Op::exp:
    case Op::log:
    case Op::pow:
    case Op::sqrt:
    case Op::sigmoid:
      return true;
    default:
      break;
  }
  for (const auto& a : n.args)
    if (calls_transcendental(*a)) return true;
  return false;
}
}  // namespace

bool heavy(const Program& p) {
  return !p.is_mask && p.root && calls_transcendental(*p.root);
}

std::vector<GradTable> grad_tables(const Program& p) {
  std::vector<GradTable> out;
  if (p.is_mask) return out;
  for (size_t i = 0; i < p.params.size(); ++i) {
    if (p.grad_offset[i] < 0) continue;
    const ParamDecl& d = p.params[i];
    bool by_head = !d.shape.empty();
    for (const Node* o : p.occurrences)
      if (o->param == int(i)) by_head = by_head && !o->args.empty() && o->args[0]->op == Op::h;
    out.push_back({p.grad_offset[i], d.numel(), by_head ? d.numel() / d.shape[0] : 0});
  }
  return out;
}

int64_t grad_slots(const Program& p, int64_t group) {
  int64_t n = 0;
  for (const GradTable& t : grad_tables(p)) n += t.per_head > 0 ? group * t.per_head : t.numel;
  return n;
}

int bound_slots(const Program& p) {
  if (p.is_mask || !p.root) return 1;
  return std::max<int>(1, int(bound_reads(p).size()));
}

int fold_count(const Program& p) {
  if (p.is_mask || !p.root) return 0;
  return int(folded(p, true).folds.size());
}

std::vector<float> folded_constants(const Program& p, float scale) {
  std::vector<float> out;
  if (p.is_mask || !p.root) return out;
  for (const FoldRecipe& r : folded(p, true).recipes) out.push_back(run_recipe(r, scale));
  return out;
}

std::string emit_cuda(const Program& p, const std::string& name, bool constants_as_members) {
  // Nothing reaches the source but this file's text and canonical printing of the checked
  // program, whose only user-given words are its parameters' names: identifiers, checked
  // when the program was compiled, and checked again here.
  for (const ParamDecl& d : p.params) {
    const std::string problem = param_name_problem(d.name);
    DL_CHECK(problem.empty(), "score_mod", problem);
  }
  Emitter em{p, constants_as_members, bound_reads(p)};
  std::ostringstream o;
  const char* locals =
      "    const int hg = h + head_offset, q = q_idx, k = k_idx;\n"
      "    (void)b; (void)hg; (void)q; (void)k;\n";
  o << kHelpers << "// " << (p.is_mask ? "mask_mod: " : "score_mod: ") << p.canonical() << "\n"
    << "struct " << name << " {\n";
  for (const ParamDecl& d : p.params)
    o << "  const float* p_" << d.name << ";  // " << (d.learnable ? "learnable " : "") << "("
      << (d.shape.empty() ? "" : std::to_string(d.shape[0]))
      << (d.shape.size() > 1 ? ", " + std::to_string(d.shape[1]) : "") << ")\n";
  if (p.param_count > 0)
    o << "  unsigned long long* grad_acc;  // the gradient's fixed-point sums (hi, lo, overflow)\n";
  o << "  int head_offset;  // h of the expression = head_offset + the call's head\n";
  if (!p.is_mask)
    o << "  static constexpr bool kHeavy = " << (heavy(p) ? "true" : "false")
      << ";  // the forward's tile shapes (fast_common.cuh HeavyMod)\n";
  const size_t slots = p.constants().size();
  if (constants_as_members && slots > 0)
    o << "  float c[" << slots << "];  // real literals by slot\n"
      << "  long long ci[" << slots << "];  // integer literals by slot\n";
  if (p.is_mask) {
    o << "  __device__ bool visible(int b, int h, int q_idx, int k_idx) const {\n"
      << locals << "    (void)h;\n    return " << em.e(*p.root) << ";\n  }\n};\n";
    return o.str();
  }
  // Bound: the head-only table reads, filled once per head by bind_into; value and
  // derivative read them from bd when given, from the tables otherwise.
  const Folded f = folded(p, constants_as_members);
  const bool guard = may_be_minus_inf(p);
  if (!f.folds.empty())
    o << "  float f[" << f.folds.size() << "];  // folded constants (host: folded_constants)\n";
  o << "  struct Bound { float v[" << bound_slots(p) << "]; };\n"
    << "  __device__ void bind_into(Bound& bd_out, int h) const {\n"
    << "    const int hg = h + head_offset, q = 0, k = 0;\n"
    << "    (void)hg; (void)q; (void)k;\n    const Bound* bd = nullptr; (void)bd;\n";
  em.use_bound = false;
  for (size_t i = 0; i < em.bound.size(); ++i)
    o << "    bd_out.v[" << i << "] = " << em.e(*em.bound[i]) << ";\n";
  em.use_bound = true;
  o << "  }\n"
    << "  // The kernels' form: of the raw dot product (score = scale * dot, the scale the\n"
    << "  // host folded into f), bd bound by bind_into; the value in log2 units.\n"
    << "  __device__ float value_log2(float dot, float scale, int b, int h, int q_idx, int k_idx,\n"
    << "                              const Bound* bd) const {\n"
    << locals << "    const float score = dot * scale; (void)score;\n"
    << returned(f.value, guard) << "  }\n"
    << "  __device__ float derivative_dot(float dot, float scale, int b, int h, int q_idx,\n"
    << "                                  int k_idx, const Bound* bd) const {\n"
    << locals << "    const float score = dot * scale; (void)score;\n"
    << "    return " << f.derivative << ";\n  }\n"
    << "  __device__ float value(float score, int b, int h, int q_idx, int k_idx,\n"
    << "                         const Bound* bd = nullptr) const {\n"
    << locals << returned(em.e(*p.root), guard) << "  }\n"
    << "  __device__ float derivative(float score, int b, int h, int q_idx, int k_idx,\n"
    << "                              const Bound* bd = nullptr) const {\n"
    << locals << "    return " << em.e(*p.d_score) << ";\n  }\n";
  // Learnable tables: grad_tables' description, and each occurrence's entry and
  // derivative handed to the kernel's accumulator (acc.add(table, entry, dvalue, d)).
  const std::vector<GradTable> tables = grad_tables(p);
  o << "  static constexpr bool kHasParamGrad = " << (p.param_count > 0 ? "true" : "false")
    << ";\n  static constexpr int kGradTables = " << tables.size() << ";\n";
  if (p.param_count > 0) {
    o << "  __host__ __device__ long long param_count() const { return " << p.param_count
      << "LL; }\n"
      << "  __device__ static void grad_table(int t, long long& offset, long long& numel,\n"
      << "                                    long long& per_head) {\n    switch (t) {\n";
    for (size_t t = 0; t < tables.size(); ++t)
      o << "      case " << t << ": offset = " << tables[t].offset
        << "LL; numel = " << tables[t].numel << "LL; per_head = " << tables[t].per_head
        << "LL; return;\n";
    o << "      default: offset = numel = per_head = 0; return;\n    }\n  }\n"
      << "  template <class Acc>\n"
      << "  __device__ __forceinline__ void param_grad(float dvalue, float score, int b, int h, "
         "int q_idx, int k_idx, Acc& acc) const {\n"
      << locals;
    em.use_bound = false;  // reads the tables (no Bound here)
    const std::vector<int> table_of = grad_table_of(p);
    for (size_t i = 0; i < p.occurrences.size(); ++i) {
      const Node& occ = *p.occurrences[i];
      std::string idx = "0LL";
      for (size_t d = 0; d < occ.args.size(); ++d)
        idx = "(" + idx + " * " + std::to_string(occ.shape[d]) + "LL + " + em.e(*occ.args[d]) + ")";
      o << "    acc.add(" << table_of[size_t(occ.param)] << ", " << idx << ", dvalue, "
        << em.e(*p.d_occurrence[i]) << ");\n";
    }
    em.use_bound = true;
    o << "  }\n";
  }
  o << "};\n";
  return o.str();
}

}  // namespace driftless::layers::expr
